"""The one record of when each Kanban worker last showed a sign of life.

Signs of life: the worker's child says hello (``running``), reports progress
(after each model and tool call), calls any ``kanban.*`` op, or heartbeats.
Durations are measured on the monotonic clock; the wall-clock time of the last
beat is what the task's ``heartbeat_at`` column shows (written by
:meth:`Liveness.beat` for an explicit heartbeat and by the dispatcher's claim
check for the others).
"""

from __future__ import annotations

from hermesd import clock


class Liveness:
    """Worker job → (monotonic seconds, ISO time) of its last sign of life."""

    def __init__(self) -> None:
        self._beats: dict[str, tuple[float, str]] = {}

    def beat(self, job: str, when: str | None = None) -> str:
        """Record a sign of life of ``job`` now (``when``: its ISO time, default now); returns that time."""
        when = when or clock.now_iso()
        self._beats[job] = (clock.monotonic(), when)
        return when

    def last(self, job: str) -> tuple[float, str]:
        """(monotonic, ISO) of the last beat of ``job``; a job never seen starts its clock now."""
        return self._beats.setdefault(job, (clock.monotonic(), clock.now_iso()))

    def forget(self, job: str) -> None:
        """``job`` no longer holds a claim."""
        self._beats.pop(job, None)
