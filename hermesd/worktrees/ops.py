"""Git worktrees for jobs, the daemon's side: :class:`WorktreesPlugin` and the ``worktrees`` ops.

A job that asks for one (``worktree: true``: ``hermesctl delegate --worktree``, a
``spawn_parallel`` task, the ``delegate_task`` tool, a Kanban profile; by default every
delegation with ``delegation.worktree_isolation: true``) runs in a new ``git worktree`` of
the repository its working directory is in, on a new branch ``hermes/JOB_ID``:

* at admission (:meth:`WorktreesPlugin.admit`) its spec's ``worktree`` becomes the plan
  (:func:`hermesd.worktrees.git.plan`: the worktree at ``STATE_DIR/worktrees/JOB_ID``, a 0700
  directory; the job's directory inside the repository maps to the same place inside the
  worktree); a working directory in no repository is refused (``not_a_repository``) before
  anything starts — only a job that asked itself: the config's default leaves a job outside a
  repository in its directory;
* the child makes the worktree before its agent starts, and says what it holds when the agent
  ends (:mod:`child.worktree`); that report is merged into the job's ``spec.worktree`` before
  its terminal transition (:meth:`WorktreesPlugin.any_result`), so the result, the completion
  notification and ``ps`` name a changed worktree's path, branch and commits;
* once the job has ended, whatever the state, and its process is reaped (:meth:`WorktreesPlugin.after_exit`),
  or at the next start for a job that ended while no daemon ran (lost at restart; :meth:`restore`),
  :func:`settle` looks again in a worker thread: a worktree without a change is removed with its
  branch (``state: removed``), one with changes is kept (``state: kept``).  A job back in the queue
  to resume after a restart has not ended: its next child finds its worktree again.
  Nothing is removed while a live job works inside it (a subagent it started without a worktree of
  its own): the subagent's end settles it;
* ``worktrees`` lists them, ``worktrees.prune`` settles again every ended job's worktree that
  was kept (a branch merged since into another holds no change: it goes).

Git runs in worker threads, never on the event loop, one command at a time (the daemon's
commands on one repository never race each other for its locks), with the daemon's environment
without its secrets (:class:`hermesd.redaction.Secrets`; a repository's hooks may run).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

from hermesd import paths
from hermesd.config import Config
from hermesd.context import Context
from hermesd.contract.providers import PROVIDER_KEYS
from hermesd.contract.states import LIVE, TERMINAL
from hermesd.contract.wire import JobResult
from hermesd.plugin import Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.redaction import Secrets
from hermesd.router import op

log = logging.getLogger("hermesd")

AUTO = "auto"
"""A spec's ``worktree`` set by the config's default (``delegation.worktree_isolation``), not by
the job: outside a repository the job runs in its directory instead of being refused."""

REPORT_KEYS = ("made", "changed", "changed_files", "changes", "commit_count", "commits", "error")
"""What a child's report (``JobResult.worktree``) adds to the job's ``spec.worktree``."""

_GIT_LOCK = threading.Lock()
"""One git command of the daemon at a time (see the module doc)."""


def root(config: Config) -> Path:
    """``STATE_DIR/worktrees``: where jobs' worktrees are made (created 0700 at the first)."""
    return config.state_dir() / "worktrees"


def refused(cwd: str | None, why: str) -> ProtocolError:
    """The one-line ``not_a_repository`` refusal of a job started in ``cwd``."""
    where = f"cwd: {cwd}: " if cwd else "cwd: "
    return ProtocolError("not_a_repository", f"{where}{why}; a job with --worktree must start in a git repository "
                         "(git init, or leave --worktree off)", {"field": "cwd", "cwd": cwd})


def planned(config: Config, job_id: str, cwd: str | None) -> dict[str, str]:
    """The worktree plan of job ``job_id`` started in ``cwd`` (:func:`hermesd.worktrees.git.plan`);
    raises ``ProtocolError(not_a_repository)`` (:func:`refused`) outside a repository, or for a job
    given no working directory (it would work in its own empty one)."""
    if cwd is None:
        raise refused(None, "the job has no working directory of its own (pass one in a git repository)")
    from hermesd.worktrees import git  # here: a daemon whose jobs ask for no worktree does without (Plugin.on_demand)

    try:
        return git.plan(cwd, job_id, root(config))
    except git.NotARepository as exc:
        raise refused(None, str(exc)) from None


def check(cwd: str | None, spec: dict[str, Any]) -> None:
    """Refuse a task that asks itself for a worktree (``spec["worktree"] is True``) in ``cwd``
    outside a repository, before any task of a request is admitted (``spawn_parallel``); raises
    ``ProtocolError(not_a_repository)``."""
    if spec.get("worktree") is True and cwd is not None:
        from hermesd.worktrees import git

        if git.top_level(cwd) is None:
            raise refused(None, f"{cwd} is not in a git repository (no .git in it or above it)")


def working_dir(row: dict[str, Any]) -> str | None:
    """Where job ``row`` works: its worktree's directory when it has one, else its ``cwd``
    (what a subagent it starts inherits)."""
    worktree = (row.get("spec") or {}).get("worktree")
    return worktree["cwd"] if isinstance(worktree, dict) else row.get("cwd")


def settle(worktree: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """In a worker thread: look at ``worktree`` again and remove it with its branch when it holds
    no change.  Returns what to merge into the job's ``spec.worktree``: the inspection and
    ``state`` (``removed`` or ``kept``); when git fails, ``kept`` with the ``error``."""
    from hermesd.worktrees import git

    with _GIT_LOCK:
        try:
            found = git.inspect(worktree, env)
            if found["made"] and not found["changed"]:
                git.remove(worktree, env)
            return {**found, "error": None, "state": "kept" if found["changed"] else "removed"}
        except (git.GitError, OSError) as exc:
            return {"error": str(exc), "state": "kept"}


class WorktreesPlugin(Plugin):
    """Jobs' git worktrees (see the module doc).  It declares no job kind; its hooks see every job."""

    on_demand = ("hermesd.worktrees.git",)

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self._settling: dict[str, asyncio.Future] = {}
        ctx.provide(self)  # the ops settle through it

    def env(self) -> dict[str, str]:
        """The daemon's environment without its secrets (:class:`hermesd.redaction.Secrets`): git's."""
        return Secrets((*PROVIDER_KEYS, *self.ctx.config.secrets)).tool_environment(os.environ)

    def admit(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        """A job whose spec asks for a worktree (``worktree: true``, or :data:`AUTO`) gets its plan
        (a retried job a new one); raises ``ProtocolError(not_a_repository)`` (:func:`planned`)."""
        spec = fields.get("spec") or {}
        wanted = spec.get("worktree")
        if not wanted:
            spec.pop("worktree", None)
            return
        try:
            plan = planned(self.ctx.config, job_id, fields.get("cwd"))
        except ProtocolError:
            if wanted != AUTO:
                raise
            spec.pop("worktree")
            return
        paths.ensure_private_dir(root(self.ctx.config))
        fields["spec"] = {**spec, "worktree": plan}

    def any_result(self, row: dict[str, Any], result: JobResult) -> None:
        """The child's report of its worktree, merged into the job's ``spec.worktree`` before
        the terminal transition (so the result, the notification and ``ps`` show it)."""
        spec = row.get("spec") or {}
        if isinstance(spec.get("worktree"), dict) and isinstance(result.worktree, dict):
            report = {k: result.worktree.get(k) for k in REPORT_KEYS if k in result.worktree}
            self.ctx.jobs.update(row["id"], spec={**spec, "worktree": {**spec["worktree"], **report}})

    def after_exit(self, row: dict[str, Any] | None) -> None:
        """An ended job's worktree: :meth:`start_settling` it (a job back in the queue keeps its own),
        and its parent's, left alone while this job worked inside it, once the parent has ended."""
        if row is not None and row["status"] in TERMINAL:
            self.start_settling(row)
            parent = self.ctx.jobs.get(row["parent"]) if row.get("parent") else None
            if parent is not None and parent["status"] in TERMINAL:
                self.start_settling(parent)

    def restore(self) -> None:
        """At start-up: settle the worktrees of jobs that ended without it (lost at restart, or
        ended just before a ``kill -9`` of the daemon)."""
        for row in self.ctx.store.all(
                "SELECT * FROM jobs WHERE json_extract(spec, '$.worktree.path') IS NOT NULL "
                f"AND json_extract(spec, '$.worktree.state') IS NULL AND status IN ({', '.join('?' * len(TERMINAL))})",
                [str(status) for status in TERMINAL]):
            self.start_settling(row)

    def start_settling(self, row: dict[str, Any], again: bool = False) -> asyncio.Future | None:
        """:func:`settle` job ``row``'s worktree in a worker thread, its outcome written to its
        ``spec.worktree`` back on the loop; returns the future of that (None: nothing to do, or
        a live job works inside the worktree).  ``again``: also one already settled and kept."""
        worktree = (row.get("spec") or {}).get("worktree")
        if not isinstance(worktree, dict) or (worktree.get("state") and not again) or worktree.get("state") == "removed":
            return None
        if row["id"] in self._settling:
            return self._settling[row["id"]]
        inside = os.path.join(worktree["path"], "")
        if any(os.path.join(r.get("cwd") or "", "").startswith(inside)
               for r in self.ctx.jobs.list(statuses=LIVE) if r["id"] != row["id"]):
            return None
        job_id = row["id"]
        future = self.ctx.loop.run_in_executor(None, settle, worktree, self.env())

        def written(done: asyncio.Future) -> None:
            self._settling.pop(job_id, None)
            if done.cancelled():
                return
            self._record(job_id, done.result())

        self._settling[job_id] = future
        future.add_done_callback(written)
        return future

    def _record(self, job_id: str, outcome: dict[str, Any]) -> None:
        """Write a settled worktree's ``outcome`` into job ``job_id``'s ``spec.worktree``."""
        row = self.ctx.jobs.get(job_id)
        spec = (row or {}).get("spec") or {}
        if not isinstance(spec.get("worktree"), dict):
            return
        worktree = {**spec["worktree"], **outcome}
        self.ctx.jobs.update(job_id, spec={**spec, "worktree": worktree})
        if outcome.get("error"):
            log.warning("worktree of %s kept at %s: %s", job_id, worktree["path"], outcome["error"])
        elif outcome["state"] == "kept":
            log.info("worktree of %s kept: %s (branch %s)", job_id, worktree["path"], worktree["branch"])

    def shutdown(self) -> None:
        """Forget the settlings under way (their git commands end in their threads; the next start
        settles what was not written)."""
        self._settling.clear()


def listed(row: dict[str, Any]) -> dict[str, Any]:
    """One entry of ``worktrees``: ``{job, status, path, branch, repo, cwd, state, exists,
    changed, changed_files, changes, commit_count, commits, error}`` (``state``: ``in_use`` while the
    job lives, ``settling`` once it ended until :func:`settle` is done, ``kept``, ``removed``)."""
    worktree = row["spec"]["worktree"]
    state = worktree.get("state") or ("settling" if row["status"] in TERMINAL else "in_use")
    return {"job": row["id"], "status": row["status"], "state": state, "exists": os.path.isdir(worktree["path"]),
            **{k: worktree.get(k) for k in ("path", "branch", "repo", "cwd", *REPORT_KEYS)}}


def worktree_rows(ctx: Context, include_removed: bool) -> list[dict[str, Any]]:
    """The rows of jobs with a worktree, oldest first (the removed ones with ``include_removed``)."""
    sql = "SELECT * FROM jobs WHERE json_extract(spec, '$.worktree.path') IS NOT NULL"
    if not include_removed:
        sql += " AND coalesce(json_extract(spec, '$.worktree.state'), '') != 'removed'"
    return ctx.store.all(sql + " ORDER BY rowid")


@op("worktrees")
async def worktrees(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The jobs' git worktrees: ``{worktrees: [entry…]}`` (see :func:`listed`), oldest first;
    those still there, or every one with ``all=true``."""
    return {"worktrees": [listed(r) for r in worktree_rows(ctx, arg(args, "all", bool, False))]}


@op("worktrees.prune", work=True)
async def prune(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Remove the worktrees of ended jobs that hold no change (clean, or whose branch was merged
    since into another branch), with their branches; the rest are kept.  Returns ``{removed:
    [entry…], kept: [entry…]}`` (see :func:`listed`); a live job's worktree is left alone."""
    plugin = ctx.service(WorktreesPlugin)
    pending = [(row["id"], plugin.start_settling(row, again=True))
               for row in worktree_rows(ctx, False) if row["status"] in TERMINAL]
    await asyncio.gather(*(f for _, f in pending if f is not None))
    out: dict[str, list[dict[str, Any]]] = {"removed": [], "kept": []}
    for job_id, _ in pending:
        entry = listed(ctx.jobs.require(job_id))
        out["removed" if entry["state"] == "removed" else "kept"].append(entry)
    return out
