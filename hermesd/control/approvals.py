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
(``approvals.list`` with ``follow: true`` within
:data:`hermesd.control.approval_service.FOLLOW_SECONDS`) and no ``hermesctl
chat`` of the job's session open (the same, with its ``session`` and ``watcher``) — the request is
refused at once, as before there were approvals, saying why.  No agent can answer: the ops
are the client's, and an answer sent from a job's own processes (their ``pid`` carries this
daemon's ``HERMES_SUPERVISOR``) is refused.  Every state change is one transaction with its
``approval.*`` event, published after the commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from hermesd.control.approval_service import Approvals

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

MAX_WAIT_SECONDS = 30.0
"""Longest one ``child.approval_wait`` waits before it answers ``pending``."""

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
    on_demand = ("hermesd.control.approval_service",)

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self._approvals: "Approvals | None" = None  # made at the first need (:attr:`approvals`)
        ctx.provide(self)  # the ops reach the service through it

    @property
    def approvals(self) -> "Approvals":
        """The requests' service (:mod:`hermesd.control.approval_service`), made at its first use."""
        if self._approvals is None:
            from hermesd.control.approval_service import Approvals

            self._approvals = self.ctx.provide(Approvals(self.ctx, self.ctx.service(JobEndHooks)))
        return self._approvals

    def any_spec(self, row: dict[str, Any], spec: JobSpec) -> None:
        """Every child's ``approval_tools``: the tools of ``approvals.always``."""
        spec.approval_tools = list(self.ctx.config.approvals.always)

    def on_event(self, event: dict[str, Any]) -> None:
        """A job that ended cancels its pending requests (none before the service is made)."""
        if self._approvals is not None and event.get("type") == "job.state" and (event.get("data") or {}).get("status") in TERMINAL:
            self.approvals.end_of(event.get("job") or "")

    def restore(self) -> None:
        """Cancel what ended with the earlier daemon; arm the rest (the service made only when one is pending)."""
        if self.ctx.store.db.execute("SELECT 1 FROM approvals WHERE state = 'pending' LIMIT 1").fetchone():
            self.approvals.restore()

    def shutdown(self) -> None:
        """Stop the deadline timers."""
        if self._approvals is not None:
            self._approvals.shutdown()


def _service(ctx: Context) -> "Approvals":
    return ctx.service(ApprovalsPlugin).approvals


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
    service = _service(ctx)
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
    return _service(ctx).answer(arg(args, "id", str), "approved", arg(args, "reason", str, None),
                                arg(args, "by", str, None) or "a person")


@op("approvals.deny")
async def approvals_deny(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Deny the pending request ``id`` with an optional ``reason`` (the model is told it as the
    tool's result).  ``by``, ``pid`` as for ``approvals.approve``.  Returns the request."""
    _not_a_job(ctx, args)
    by = arg(args, "by", str, None) or "a person"
    reason = arg(args, "reason", str, None)
    return _service(ctx).answer(arg(args, "id", str), "denied",
                                f"denied by {by}" + (f": {reason}" if reason else ""), by)


@op("child.approval", child=True)
async def child_approval(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """A child's tool call that needs a person: ``tool``, ``arguments`` (a map), ``why``.  Returns
    the request (``state`` ``pending``; ``denied`` at once with the reason when nobody can be asked)."""
    ctx.runner.activity.seen(job)
    arguments = arg(args, "arguments", dict, {})
    return _service(ctx).request(job, arg(args, "tool", str), arguments, arg(args, "why", str, ""))


@op("child.approval_find", child=True)
async def child_approval_find(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Whether this job has a request waiting for the call of ``tool`` with ``arguments`` (a job
    resumed after a restart asks it of a call the restart interrupted): ``{pending, request}``."""
    found = _service(ctx).pending_for(job, arg(args, "tool", str), arg(args, "arguments", dict, {}))
    return {"pending": found is not None, "request": found}


@op("child.approval_wait", child=True)
async def child_approval_wait(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Wait up to ``seconds`` (at most 30) for the answer to request ``id`` of this job; returns
    the request (``state`` still ``pending`` when none came).  A sign of life of the job."""
    ctx.runner.activity.seen(job)
    service = _service(ctx)
    request = service.get(arg(args, "id", str))
    if request["job"] != job:
        raise ProtocolError("not_found", f"no approval request {request['id']!r} of job {job}", {"id": request["id"]})
    seconds = min(MAX_WAIT_SECONDS, max(0.0, float(arg(args, "seconds", (int, float), 1.0))))
    answered = await service.wait(request["id"], seconds)
    ctx.runner.activity.seen(job)
    return answered
