"""The Kanban dispatcher: ready tasks become worker children; silent workers lose their claim.

It runs on the daemon's event loop, every ``kanban.dispatch_interval_seconds``
and whenever the board changes (a *kick*):

1. **Claims are checked.**  A worker is on the clock from the moment its
   child says hello (``running``); every sign of life — ``child.progress``
   after each model call and tool call, any ``kanban.*`` child op, an explicit
   ``kanban_heartbeat`` — renews its claim.  A claim older than
   ``kanban.heartbeat_ttl_seconds`` is reclaimed: the task goes back to the
   queue (a failed attempt) and the worker's process is stopped.  Queued
   workers (waiting for ``supervisor.max_children``) are not on the clock.
2. **Ready tasks are claimed** (highest priority first), each atomically, and
   a ``kanban_worker`` job is submitted for it — workers count against
   ``supervisor.max_children``; once it is full, one worker waits in its queue
   and the other ready tasks stay ``ready`` — with the assignee's profile:
   its model and provider, its toolsets without ``delegation`` and with
   ``kanban`` (the child offers the worker tools only), a system prompt about
   its one task, and the results of the tasks it waited for as context.

When a worker job ends while it still holds its claim (it never called
``kanban_complete`` or ``kanban_block``), the task goes back to the queue as a
failed attempt — in the same transaction as the job's terminal state.  After
``kanban.max_spawn_failures`` failed attempts in a row (spawn errors, crashes,
stale claims, endings without a result) the task is ``blocked`` with the last
reason.  A worker cancelled by request blocks its task; a worker interrupted
by the daemon's shutdown, or lost in a crash, returns it without a failure.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hermesd import clock, paths
from hermesd.contract.states import TERMINAL, JobStatus
from hermesd.contract.toolsets import MCP_TOOLSET, WORKER_ROLE
from hermesd.mcp.config import servers
from hermesd.mcp.ops import OWN as OWN_MCP
from hermesd.kanban import profiles
from hermesd.kanban.board import Board
from hermesd.kanban.schema import WORKER_KIND
from hermesd.protocol import ProtocolError, expand_toolsets

log = logging.getLogger("hermesd.kanban")

NOT_FOR_WORKERS = ("delegation", "kanban")
"""Toolsets a profile may list that a worker does not get as listed (``kanban`` is added back as worker tools)."""

WORKER_PROMPT = """You are a Kanban worker run by hermesd, with the profile {profile!r}: {description}

You were started for one task on the board {board!r}: {task} ({title!r}). Only this task is yours; the
rest of the board is not visible to you. Do the task with your tools, then call kanban_complete with
the result (what you did, and the answer) and the artifacts you produced (file paths or URLs). If you
cannot do it because something is missing, call kanban_block with the reason instead. Use
kanban_comment for notes and kanban_heartbeat during long work: a worker silent for
{ttl:g} seconds loses its task. Ending without kanban_complete counts as a failed attempt."""


class Dispatcher:
    """The dispatcher of one daemon (``ctx.service(Dispatcher)``); :attr:`board` is the board."""

    def __init__(self, d: Any):
        self.d = d
        self.board = Board(d.store, d.events, kick=self.kick)
        self.liveness = self.board.liveness
        self.active = False
        self._timer: Any = None
        self._kicked = False

    # timing ----------------------------------------------------------------

    def start(self) -> None:
        """Begin dispatching (after start-up reconciliation): a timer, and a first pass now."""
        self.active = True
        self._schedule()
        self.kick()

    def stop(self) -> None:
        """Stop dispatching (shutdown)."""
        self.active = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def kick(self) -> None:
        """Run a pass soon (once, however many changes ask for it)."""
        if self.active and not self._kicked:
            self._kicked = True
            self.d.loop.call_soon(self._kicked_pass)

    def _schedule(self) -> None:
        self._timer = self.d.loop.call_later(self.d.config.kanban.dispatch_interval_seconds, self._timed_pass)

    def _timed_pass(self) -> None:
        self.dispatch()
        if self.active:
            self._schedule()

    def _kicked_pass(self) -> None:
        self._kicked = False
        self.dispatch()

    def dispatch(self) -> None:
        """One pass: check claims, then start a worker for every ready task.  Never raises."""
        if not self.active or self.d.stopping or not self.d.runner.accepting:
            return
        try:
            self.check_claims()
            for row in self.board.list(status="ready"):
                if self.saturated() or self.d.runner.pause.paused:  # paused: tasks stay ready, unclaimed
                    break
                self.spawn(row)
        except Exception:  # the daemon never dies of a dispatch pass
            log.exception("kanban dispatch pass failed")

    def saturated(self) -> bool:
        """True when ``supervisor.max_children`` has no room beyond the queue and a worker
        already waits in it: further ready tasks stay ``ready`` rather than all being
        claimed by workers that could only queue."""
        scheduler = self.d.scheduler
        prefix = self.d.jobs.kind(WORKER_KIND).prefix + "_"
        return (scheduler.room("global") <= len(scheduler.queue)
                and any(job.startswith(prefix) for job in scheduler.queued_jobs()))

    # claims ------------------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        """Event listener: a worker that starts running or reports progress is alive."""
        job = event.get("job") or ""
        if not job.startswith(self.d.jobs.kind(WORKER_KIND).prefix + "_"):
            return
        data = event.get("data") or {}
        if event["type"] == "job.progress" or (event["type"] == "job.state" and data.get("status") == "running"):
            self.liveness.beat(job, event.get("time"))

    def check_claims(self) -> None:
        """Reclaim claims whose worker is gone or silent for longer than the TTL;
        write the last heartbeat time of the others."""
        ttl = self.d.config.kanban.heartbeat_ttl_seconds
        now = clock.monotonic()
        for row in self.board.list(status="running"):
            job = row["claimed_by"]
            job_row = self.d.jobs.get(job) if job else None
            if job_row is None or job_row["status"] in TERMINAL:
                self._release(row, job, f"its worker {job} is no longer running", failure=False)
                continue
            if job_row["status"] != JobStatus.RUNNING:
                continue  # queued for a slot, or starting: not on the clock yet
            mono, when = self.liveness.last(job)
            if now - mono > ttl:
                self.reclaim(row, job, f"no sign of life from worker {job} for {ttl:g}s "
                                       "(kanban.heartbeat_ttl_seconds): claim reclaimed")
            elif when > (row["heartbeat_at"] or ""):
                self.board.show_heartbeat(row, when)

    def reclaim(self, row: dict[str, Any], job: str, reason: str) -> None:
        """Take ``row`` back from worker ``job`` (a failed attempt) and stop the worker's process."""
        self._release(row, job, reason, failure=True)
        self.liveness.forget(job)
        try:
            self.d.runner.stop(job, "kanban_reclaim")
        except ProtocolError:
            pass  # it ended meanwhile

    def _release(self, row: dict[str, Any], job: str | None, reason: str, *, failure: bool, **kwargs: Any) -> dict:
        return self.board.release(row, job=job, reason=reason, failure=failure,
                                  max_failures=self.d.config.kanban.max_spawn_failures, **kwargs)

    def on_terminal(self, job_row: dict[str, Any]) -> list[dict[str, Any]]:
        """Terminal hook (inside the job's terminal transaction): a worker that ends
        while holding its claim gives the task back; returns the events to publish."""
        self.liveness.forget(job_row["id"])
        task = self.board.claimed_by(job_row["id"])
        if task is None:
            return []  # completed, blocked, archived or reclaimed already
        status, stop = job_row["status"], job_row.get("stop_reason")
        out: list[dict[str, Any]] = []
        kwargs = {"job": job_row["id"], "out": out}
        if status == "lost" or stop == "shutdown":
            self._release(task, reason=f"worker {job_row['id']} {status}: hermesd stopped", failure=False, **kwargs)
        elif stop == "cancel":
            self._release(task, reason=f"worker {job_row['id']} was cancelled by request", failure=False,
                          block=True, **kwargs)
        else:
            self._release(task, reason=worker_failure(job_row), failure=True, **kwargs)
        self.kick()
        return out

    # spawning ------------------------------------------------------------------

    def spawn(self, row: dict[str, Any]) -> None:
        """Claim ready task ``row`` and submit its worker; a failure to start counts
        against the task (and blocks it after ``kanban.max_spawn_failures``)."""
        try:
            profile = profiles.load(row["assignee"])
        except ProtocolError as err:
            self._release(row, None, f"cannot start a worker: {err.message}", failure=True,
                          spawn_failed=True)
            return
        job = self.d.jobs.new_id(WORKER_KIND)
        claimed = self.board.claim(row["id"], job)
        if claimed is None:
            return
        try:
            self.d.runner.submit(WORKER_KIND, id=job, **self.worker_fields(claimed, profile))
        except ProtocolError as err:
            self._release(self.board.require(row["id"]), job, f"could not start worker {job}: {err.message}",
                          failure=err.code != "shutting_down", spawn_failed=True)

    def workspace(self, board: str) -> Path:
        """The shared working directory of a board's workers: ``STATE_DIR/kanban/BOARD``."""
        return paths.ensure_private_dir(self.d.config.state_dir() / "kanban" / board)

    def worker_fields(self, task: dict[str, Any], profile: profiles.Profile) -> dict[str, Any]:
        """The ``jobs`` fields of the worker for ``task`` run with ``profile``."""
        base = profile.toolsets if profile.toolsets is not None else expand_toolsets(list(self.d.config.toolsets))
        prompt = WORKER_PROMPT.format(profile=profile.name, description=profile.description, board=task["board"],
                                      task=task["id"], title=task["title"],
                                      ttl=self.d.config.kanban.heartbeat_ttl_seconds)
        goal = f"Task {task['id']}: {task['title']}" + (f"\n\n{task['body']}" if task["body"] else "")
        own = servers(profile.mcp_servers)  # its own MCP servers: only its workers get them
        return {"goal": goal, "context": self.context(task) or None, "role": WORKER_ROLE,
                "toolsets": [t for t in base if t not in NOT_FOR_WORKERS] + ["kanban"]
                + [MCP_TOOLSET + name for name, server in own.items() if server.enabled and MCP_TOOLSET + name not in base],
                "model": profile.model, "provider": profile.provider, "depth": 1, "parent": task["id"],
                "cwd": task["cwd"] or str(self.workspace(task["board"])),
                "spec": {"system_prompt": prompt, **({"worktree": True} if profile.worktree else {}),
                         **({OWN_MCP: {n: v.to_wire() for n, v in own.items()}} if own else {})}}

    def context(self, task: dict[str, Any]) -> str:
        """What a worker should know besides its task: the results of the tasks it
        waited for, the comments on its task, and why the last attempt failed."""
        parts = []
        for parent in self.board.parents(task["id"]):
            text = f"Result of {parent['id']} ({parent['title']}):\n{parent['result'] or '(none)'}"
            if parent["artifacts"]:
                text += "\nArtifacts: " + ", ".join(parent["artifacts"])
            parts.append(text)
        comments = self.board.comments(task["id"])
        if comments:
            parts.append("Comments on this task:\n" + "\n".join(f"- {c['author']}: {c['text']}" for c in comments))
        if task["attempts"] > 1 and task["last_error"]:
            parts.append(f"This is attempt {task['attempts']}; the previous one failed: {task['last_error']}")
        return "\n\n".join(parts)


def worker_failure(job_row: dict[str, Any]) -> str:
    """Why a worker job that ended holding its claim failed its attempt (one line or a few)."""
    job, status = job_row["id"], job_row["status"]
    if status == "completed":
        answer = " ".join((job_row.get("summary") or "").split())[:300]
        return f"worker {job} finished without calling kanban_complete" + (f"; its last answer: {answer}" if answer
                                                                          else "")
    return f"worker {job} ended {status} without calling kanban_complete: {job_row.get('error') or 'no error given'}"
