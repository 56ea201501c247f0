"""Job and Kanban task states, and why the daemon stops a job.

A leaf (standard library only) of :mod:`hermesd.contract`:

* :class:`JobStatus` and the :data:`TERMINAL`, :data:`ACTIVE` and :data:`LIVE` sets (the
  transitions themselves are the daemon's: :data:`hermesd.jobs.TRANSITIONS`);
* :class:`KanbanStatus` (the board's transitions: :data:`hermesd.kanban.board.TRANSITIONS`);
* :data:`STOP_REASONS`: why the daemon stops a job, with the status, exit_reason
  and error text the job ends with (:func:`exit_reason_of` for a job that ended without saying why).

Statuses are ``str`` enums: a member equals (and hashes as) its value, so rows
read from the database and maps read from the wire compare with them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobStatus(StrEnum):
    """The states of a job (the state machine: :mod:`hermesd.jobs`)."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LOST = "lost"


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.INTERRUPTED, JobStatus.TIMED_OUT,
                      JobStatus.CANCELLED, JobStatus.LOST})
"""Final job states: nothing leaves them."""
ACTIVE = (JobStatus.STARTING, JobStatus.RUNNING)
"""Job states with a live process (or, for a job kind without one, live work)."""
LIVE = (JobStatus.QUEUED, *ACTIVE)
"""Job states that are not final (what ``hermesctl ps`` lists by default)."""


class KanbanStatus(StrEnum):
    """The states of a Kanban task; how a task moves: :mod:`hermesd.kanban.board`."""

    TRIAGE = "triage"
    TODO = "todo"
    READY = "ready"
    RUNNING = "running"
    BLOCKED = "blocked"
    DONE = "done"
    ARCHIVED = "archived"


@dataclass(frozen=True)
class StopReason:
    """Why the daemon stops a job, and how the job then ends.

    ``status``: the terminal state it ends in whatever the child reports, or
    None when the child's own report decides (``failed`` without one);
    ``exit_reason``: the ``exit_reason`` it ends with when the child reported
    none; ``error``: the error text when the child gave none.
    """

    name: str
    status: JobStatus | None
    exit_reason: str | None
    error: str


STOP_REASONS: dict[str, StopReason] = {r.name: r for r in (
    StopReason("cancel", JobStatus.CANCELLED, "interrupted", "cancelled by request"),
    StopReason("timeout", JobStatus.TIMED_OUT, "timeout", "wall-clock limit reached"),
    StopReason("shutdown", JobStatus.INTERRUPTED, "interrupted", "hermesd shut down"),
    StopReason("session_stop", JobStatus.INTERRUPTED, "interrupted", "stopped by /stop in its session"),
    StopReason("parent_stop", JobStatus.INTERRUPTED, "interrupted", "parent_stop"),
    StopReason("stale", JobStatus.INTERRUPTED, "stale", "stale: no activity"),
    StopReason("agent_stop", JobStatus.INTERRUPTED, "interrupted", "stopped by the agent that started it"),
    StopReason("kanban_archive", None, None, "kanban_archive"),
    StopReason("kanban_reclaim", None, None, "kanban_reclaim"),
    # not the daemon's stop but the kernel's, for a child_limits limit (hermesd.system.limits names which)
    StopReason("resource_limit", JobStatus.FAILED, "resource_limit", "a resource limit was exceeded"),
    # a budget (hermesd.ledger) refused the job's next model call; the error names it, the spend and the limit
    StopReason("budget_exceeded", JobStatus.FAILED, "budget_exceeded", "a budget was exceeded"),
)}
"""Every reason the daemon stops a job for (``Runner.stop(job, reason)``), by name."""


_GENERIC_STOP = {JobStatus.CANCELLED: "cancel", JobStatus.TIMED_OUT: "timeout", JobStatus.INTERRUPTED: "shutdown"}
"""For each status a stop can end in, the stop reason whose ``exit_reason`` a job gets when it ended
that way without saying why (a failure names no reason: ``resource_limit`` is never a default)."""


def exit_reason_of(status: str) -> str:
    """The ``exit_reason`` of a job that ended ``status`` without saying why: that of its generic
    stop reason (:data:`_GENERIC_STOP`, rows of :data:`STOP_REASONS`), else ``error``."""
    name = _GENERIC_STOP.get(status)  # type: ignore[call-overload]
    return (STOP_REASONS[name].exit_reason or "error") if name else "error"
