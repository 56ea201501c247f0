"""Approvals: a tool call that waits for a person instead of being refused.

A command the tripwire holds (``child.tools.policy``), or any call of a tool the config marks
``approval: always`` (``approvals.always``), parks its job: the child asks ``child.approval``
and the daemon writes a durable request — which job, its parent chain (nearest first), the
tool and its arguments, why it needs a person — as a row of ``approvals`` (migration 5) with
its ``approval.requested`` event, and runs ``hooks.on_approval_request`` (the request as JSON
on its standard input, ``HERMES_APPROVAL_ID`` in its environment; like ``on_job_end``).
People answer with the ops ``approvals.approve`` and ``approvals.deny`` (``hermesctl approve
ID``, ``hermesctl deny ID --reason …``); ``approvals.list`` shows them (``hermesctl approvals
[--follow]``).  The child asks ``child.approval_wait`` until the answer is there: approved, the
tool runs; denied, timed out (``approvals.timeout_seconds``, a wall-clock deadline kept in the
row, so a restart keeps it) or cancelled (its job ended), the model gets the reason as the
tool's result and goes on.  Each ``child.approval_wait`` is a sign of life (a waiting job is
not stale), and no model call is in flight meanwhile.

With nobody to ask — no ``hooks.on_approval_request``, nobody following the approvals
(``approvals.list`` with ``follow: true`` within :data:`FOLLOW_SECONDS`) and no ``hermesctl
chat`` of the job's session open (the same, with its ``session`` and ``watcher``) — the request is
refused at once, as before there were approvals, saying why.  No agent can answer: the ops
are the client's, and an answer sent from a job's own processes (their ``pid`` carries this
daemon's ``HERMES_SUPERVISOR``) is refused.  Every state change is one transaction with its
``approval.*`` event, published after the commit.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from hermesd import clock
from hermesd.context import Context
from hermesd.contract.states import TERMINAL
from hermesd.contract.wire import JobSpec
from hermesd.control.hooks import JobEndHooks
from hermesd.plugin import Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op
from hermesd.system import procfs
from hermesd.system.procs import SUPERVISOR_ENV

STATES = ("pending", "approved", "denied", "timed_out", "cancelled")
"""A request's states: ``pending`` until answered, then one of the others, for good."""

MIGRATIONS = {5: """
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        job TEXT NOT NULL,
        chain TEXT NOT NULL DEFAULT '[]',
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL DEFAULT '{}',
        why TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        answered_by TEXT,
        created_at TEXT NOT NULL,
        deadline REAL NOT NULL,
        answered_at TEXT
    );
    CREATE INDEX approvals_state ON approvals(state)
    """}
"""The ``approvals`` table: tool calls waiting for a person (schema version 5, :func:`hermesd.store.schema`)."""

FOLLOW_SECONDS = 30.0
"""A client that listed the approvals with ``follow: true`` this recently counts as a person to ask."""

MAX_WAIT_SECONDS = 30.0
"""Longest one ``child.approval_wait`` waits before it answers ``pending``."""

MAX_LIST = 500
"""Most requests one ``approvals.list`` returns (the newest)."""


class Approvals:
    """The approval requests of this daemon (the service of :class:`ApprovalsPlugin`)."""

    def __init__(self, ctx: Context, hooks: JobEndHooks):
        self.ctx, self.hooks = ctx, hooks
        self.waiters: dict[str, list[asyncio.Future]] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.followed: float | None = None  # monotonic time of the last follower's list
        self.chats: dict[tuple[str, str], float] = {}  # (session, watcher) → monotonic time of its last list

    # reading ---------------------------------------------------------------

    def get(self, request_id: str) -> dict[str, Any]:
        """The request ``request_id`` as :meth:`record`; raises ``ProtocolError(not_found)``."""
        row = self.ctx.store.one("SELECT * FROM approvals WHERE id = ?", (request_id,))
        if row is None:
            raise ProtocolError("not_found", f"no approval request {request_id!r}", {"id": request_id})
        return self.record(row)

    @staticmethod
    def record(row: dict[str, Any]) -> dict[str, Any]:
        """The wire shape of a row: its columns, ``deadline`` as ``expires_at`` (ISO 8601 UTC)."""
        out = {k: v for k, v in row.items() if k != "deadline"}
        out["expires_at"] = clock.iso(row["deadline"])
        return out

    def list(self, state: str | None, job: str | None, session: str | None = None) -> list[dict[str, Any]]:
        """Requests, oldest first (the newest :data:`MAX_LIST`), of ``state`` (None: all), ``job``
        and ``session`` (its jobs)."""
        where, params = [], []
        for column, value in (("state", state), ("job", job)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT * FROM approvals" + (" WHERE " + " AND ".join(where) if where else "")
        rows = self.ctx.store.all(f"{sql} ORDER BY created_at DESC, id DESC LIMIT {MAX_LIST}", params)
        return [self.record(r) for r in reversed(rows) if session is None or self.session_of(r["job"]) == session]

    def pending_for(self, job: str, tool: str, arguments: Any) -> dict[str, Any] | None:
        """The pending request of ``job`` for the call of ``tool`` with ``arguments``, or None."""
        for row in self.ctx.store.all("SELECT * FROM approvals WHERE job = ? AND tool = ? AND state = 'pending'",
                                      (job, tool)):
            if row["arguments"] == arguments:
                return self.record(row)
        return None

    def session_of(self, job: str) -> str | None:
        """The session ``job`` belongs to (a turn's, or its children's), or None."""
        return (self.ctx.jobs.get(job) or {}).get("session")

    def watch(self, session: str, watcher: str, leave: bool = False) -> None:
        """A ``hermesctl chat`` of ``session`` (its ``watcher`` id) is open (or, ``leave``, closed)."""
        if leave:
            self.chats.pop((session, watcher), None)
        else:
            self.chats[(session, watcher)] = clock.monotonic()

    def nobody(self, session: str | None = None) -> str | None:
        """Why no person can be asked now about a job of ``session``, or None when one can (a hook,
        a follower of every request, or a chat of that session open within :data:`FOLLOW_SECONDS`)."""
        if self.ctx.config.hooks.on_approval_request:
            return None
        now = clock.monotonic()
        if self.followed is not None and now - self.followed < FOLLOW_SECONDS:
            return None
        for (chat_session, watcher), seen in list(self.chats.items()):
            if now - seen >= FOLLOW_SECONDS:
                del self.chats[(chat_session, watcher)]
            elif chat_session == session:
                return None
        return ("nobody to ask: no hooks.on_approval_request is configured, nobody follows "
                "`hermesctl approvals --follow`" + (f" and no `hermesctl chat {session}` is open" if session else "")
                + "; dangerous commands run only when delegation.subagent_auto_approve is true")

    # changing --------------------------------------------------------------

    def request(self, job: str, tool: str, arguments: dict[str, Any], why: str) -> dict[str, Any]:
        """A new request of ``job`` (or, with nobody to ask, its refusal: ``state`` ``denied``, not stored).
        A pending request of the job for the same call is that request: a job resumed after a
        restart of the daemon (its journal) asks again, and still waits for the same answer."""
        again = self.pending_for(job, tool, arguments)
        if again is not None:  # the same call asked again: a job resumed after a restart
            self.ctx.runner.pause_timeout(job)
            return again
        session = self.session_of(job)
        nobody = self.nobody(session)
        if nobody is not None:
            return {"id": None, "job": job, "tool": tool, "state": "denied", "reason": nobody}
        chain, parent = [], (self.ctx.jobs.get(job) or {}).get("parent")
        while parent and parent not in chain:
            chain.append(parent)
            parent = (self.ctx.jobs.get(parent) or {}).get("parent")
        row = {"id": f"apr_{os.urandom(6).hex()}", "job": job, "chain": chain, "tool": tool, "arguments": arguments,
               "why": why, "state": "pending", "created_at": clock.now_iso(),
               "deadline": time.time() + self.ctx.config.approvals.timeout_seconds}
        with self.ctx.store.transaction():
            self.ctx.store.insert("approvals", row)
            self.ctx.events.emit("approval.requested", job=job, session=session, data=self.record(row))
        self._arm(row)
        self.ctx.runner.pause_timeout(job)  # a person's time is not the job's budget
        command = self.ctx.config.hooks.on_approval_request
        if command:
            run = self.hooks.run(command, self.ctx.jobs.get(job) or {"id": job, "status": "running"},
                                 what="hooks.on_approval_request", record=self.record(row),
                                 env={"HERMES_APPROVAL_ID": row["id"]})
            task = asyncio.get_running_loop().create_task(run)
            self.hooks.running[task] = job
            task.add_done_callback(lambda t: self.hooks.running.pop(t, None))
        return self.record(row)

    def answer(self, request_id: str, state: str, reason: str | None, by: str) -> dict[str, Any]:
        """Settle a pending request (``approved``, ``denied``, ``timed_out``, ``cancelled``); returns it.
        Raises ``ProtocolError``: ``not_found``, ``invalid_state`` (already answered)."""
        current = self.get(request_id)
        if current["state"] != "pending":
            raise ProtocolError("invalid_state", f"approval request {request_id} is already {current['state']}"
                                + (f" ({current['reason']})" if current.get("reason") else ""), {"id": request_id})
        fields = {"state": state, "reason": reason, "answered_by": by, "answered_at": clock.now_iso()}
        with self.ctx.store.transaction():
            self.ctx.store.update("approvals", "id", request_id, fields)
            self.ctx.events.emit("approval.answered", job=current["job"], session=self.session_of(current["job"]),
                                 data={**current, **fields})
        timer = self.timers.pop(request_id, None)
        if timer is not None:
            timer.cancel()
        self.ctx.runner.resume_timeout(current["job"])
        answered = {**current, **fields}
        for waiter in self.waiters.pop(request_id, []):
            if not waiter.done():
                waiter.set_result(answered)
        return answered

    async def wait(self, request_id: str, seconds: float) -> dict[str, Any]:
        """The request once it is answered, or as it is after ``seconds``."""
        current = self.get(request_id)
        if current["state"] != "pending":
            return current
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(request_id, []).append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), seconds)
        except asyncio.TimeoutError:
            return self.get(request_id)
        finally:
            waiters = self.waiters.get(request_id)
            if waiters and waiter in waiters:
                waiters.remove(waiter)

    def _arm(self, row: dict[str, Any]) -> None:
        """Time the request out at its deadline (wall clock, as stored)."""
        delay = max(0.0, row["deadline"] - time.time())
        self.timers[row["id"]] = asyncio.get_running_loop().call_later(delay, self._expire, row["id"])

    def _expire(self, request_id: str) -> None:
        self.timers.pop(request_id, None)
        limit = self.ctx.config.approvals.timeout_seconds
        try:
            self.answer(request_id, "timed_out", f"nobody answered within approvals.timeout_seconds={limit:g}",
                        "hermesd")
        except ProtocolError:
            pass  # answered meanwhile

    def end_of(self, job: str) -> None:
        """Job ``job`` ended: its pending requests are cancelled."""
        for row in self.ctx.store.all("SELECT id FROM approvals WHERE job = ? AND state = 'pending'", (job,)):
            self.answer(row["id"], "cancelled", f"job {job} ended while it waited", "hermesd")

    def restore(self) -> None:
        """At start: pending requests of jobs that ended are cancelled, the others' deadlines armed."""
        for row in self.ctx.store.all("SELECT * FROM approvals WHERE state = 'pending'"):
            job = self.ctx.jobs.get(row["job"])
            if job is None or job["status"] in TERMINAL:
                self.answer(row["id"], "cancelled", f"job {row['job']} ended while it waited (hermesd stopped "
                            f"meanwhile; the job is {job['status'] if job else 'gone'})", "hermesd")
            else:
                self._arm(row)

    def shutdown(self) -> None:
        """Deadlines are not timed in a stopped daemon (they are kept in the rows)."""
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()


class ApprovalsPlugin(Plugin):
    """Approvals (no job kind): the requests of every job."""

    events = {
        "approval.requested": "A tool call waits for a person (`hermesctl approvals`). `data`: the request: `id`, "
        "`job`, `chain` (its parents, nearest first), `tool`, `arguments`, `why`, `state` (`pending`), `created_at`, "
        "`expires_at`.",
        "approval.answered": "A request was settled: `data`: the request with its `state` (`approved`, `denied`, "
        "`timed_out`, `cancelled`: its job ended), `reason`, `answered_by`, `answered_at`.",
    }

    migrations = MIGRATIONS

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.approvals = ctx.provide(Approvals(ctx, ctx.service(JobEndHooks)))

    def any_spec(self, row: dict[str, Any], spec: JobSpec) -> None:
        """Every child's ``approval_tools``: the tools of ``approvals.always``."""
        spec.approval_tools = list(self.ctx.config.approvals.always)

    def on_event(self, event: dict[str, Any]) -> None:
        """A job that ended cancels its pending requests."""
        if event.get("type") == "job.state" and (event.get("data") or {}).get("status") in TERMINAL:
            self.approvals.end_of(event.get("job") or "")

    def restore(self) -> None:
        """Cancel what ended with the earlier daemon; arm the rest."""
        self.approvals.restore()

    def shutdown(self) -> None:
        """Stop the deadline timers."""
        self.approvals.shutdown()


def _not_a_job(ctx: Context, args: dict[str, Any]) -> None:
    """Refuse an answer sent by a job's own process (``pid``: the client's, which ``hermesctl``
    sends; a process of a job carries this daemon's ``HERMES_SUPERVISOR``)."""
    pid = arg(args, "pid", int, None)
    if pid is not None and procfs.has_env(pid, SUPERVISOR_ENV, ctx.procs.supervisor_id):
        raise ProtocolError("bad_request", "approvals are answered by people: this request comes from a job's "
                            "process, and no agent may answer its own or another job's request", {"field": "pid"})


@op("approvals.list")
async def approvals_list(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Approval requests, oldest first: ``state`` (one of ``pending``, ``approved``, ``denied``,
    ``timed_out``, ``cancelled``, or ``all``; default ``pending``), ``job`` (only its requests).
    ``session``: only the requests of its jobs (its turns and their children).
    ``follow: true`` says a person is watching them (``hermesctl approvals --follow`` sends it
    every few seconds): requests then wait for an answer instead of being refused; with
    ``session`` and ``watcher`` (an id of the watching client, as ``hermesctl chat`` sends), only
    that session's requests do, until ``leave: true`` from the same watcher (or 30 s of silence).
    Returns ``{approvals: [{id, job, chain, tool, arguments, why, state, reason, answered_by,
    created_at, expires_at, answered_at}], reachable}`` (``reachable``: whether a request made now
    would wait)."""
    state = arg(args, "state", str, "pending")
    if state not in (*STATES, "all"):
        raise ProtocolError("bad_request", f"state must be one of {', '.join(STATES)} or all", {"field": "state"})
    service = ctx.service(Approvals)
    session, watcher = arg(args, "session", str, None), arg(args, "watcher", str, None)
    if watcher is not None and session is None:
        raise ProtocolError("bad_request", "watcher needs the session it watches", {"field": "session"})
    if watcher is not None and (arg(args, "follow", bool, False) or arg(args, "leave", bool, False)):
        service.watch(session, watcher, leave=arg(args, "leave", bool, False))
    elif arg(args, "follow", bool, False):
        service.followed = clock.monotonic()
    return {"approvals": service.list(None if state == "all" else state, arg(args, "job", str, None), session),
            "reachable": service.nobody(session) is None}


@op("approvals.approve")
async def approvals_approve(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Approve the pending request ``id``: the tool runs.  ``by``: who answers (shown with it);
    ``pid``: the answering process (an answer from a job's process is refused).  Returns the
    request.  Errors: ``not_found``, ``invalid_state`` (already answered)."""
    _not_a_job(ctx, args)
    return ctx.service(Approvals).answer(arg(args, "id", str), "approved", arg(args, "reason", str, None),
                                         arg(args, "by", str, None) or "a person")


@op("approvals.deny")
async def approvals_deny(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Deny the pending request ``id`` with an optional ``reason`` (the model is told it as the
    tool's result).  ``by``, ``pid`` as for ``approvals.approve``.  Returns the request."""
    _not_a_job(ctx, args)
    by = arg(args, "by", str, None) or "a person"
    reason = arg(args, "reason", str, None)
    return ctx.service(Approvals).answer(arg(args, "id", str), "denied",
                                         f"denied by {by}" + (f": {reason}" if reason else ""), by)


@op("child.approval", child=True)
async def child_approval(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """A child's tool call that needs a person: ``tool``, ``arguments`` (a map), ``why``.  Returns
    the request (``state`` ``pending``; ``denied`` at once with the reason when nobody can be asked)."""
    ctx.runner.activity.seen(job)
    arguments = arg(args, "arguments", dict, {})
    return ctx.service(Approvals).request(job, arg(args, "tool", str), arguments, arg(args, "why", str, ""))


@op("child.approval_find", child=True)
async def child_approval_find(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Whether this job has a request waiting for the call of ``tool`` with ``arguments`` (a job
    resumed after a restart asks it of a call the restart interrupted): ``{pending, request}``."""
    found = ctx.service(Approvals).pending_for(job, arg(args, "tool", str), arg(args, "arguments", dict, {}))
    return {"pending": found is not None, "request": found}


@op("child.approval_wait", child=True)
async def child_approval_wait(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Wait up to ``seconds`` (at most 30) for the answer to request ``id`` of this job; returns
    the request (``state`` still ``pending`` when none came).  A sign of life of the job."""
    ctx.runner.activity.seen(job)
    service = ctx.service(Approvals)
    request = service.get(arg(args, "id", str))
    if request["job"] != job:
        raise ProtocolError("not_found", f"no approval request {request['id']!r} of job {job}", {"id": request["id"]})
    seconds = min(MAX_WAIT_SECONDS, max(0.0, float(arg(args, "seconds", (int, float), 1.0))))
    answered = await service.wait(request["id"], seconds)
    ctx.runner.activity.seen(job)
    return answered
