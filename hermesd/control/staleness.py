"""Stale children: when every live job last showed activity, and which ones went quiet.

A child reports activity (``child.progress``: a model call starting or ending,
a streamed reply, a tool starting or ending, tool output; see
:mod:`child.activity`), throttled to one report every few seconds while
something happens; what it was doing is kept by the runner
(:class:`hermesd.exits.Doing`).  A job whose last activity is older than its
kind's limit (its plugin's ``stale_after`` hook: ``delegation.stale_after_seconds``
for every job type of :mod:`hermesd.subagents`) is stale: the runner interrupts it with a
reason that says what it was doing (``Runner.check_stale``).  A job that waits
for its own subagents is not stale (they are checked themselves).  Monotonic
clock for the age; wall clock only for display.
"""

from __future__ import annotations

import time
from typing import Callable

from hermesd import clock


class ActivityLog:
    """Time of the last activity per live job: ``jobs[id] = (monotonic, ISO 8601 UTC)``; and
    each one's stale limit once asked (``limits[id]``: seconds, None for never)."""

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[float, str]] = {}
        self.limits: dict[str, float | None] = {}

    def seen(self, job: str) -> None:
        """Record activity of ``job`` now."""
        self.jobs[job] = (time.monotonic(), clock.now_iso())

    def forget(self, job: str) -> None:
        """``job`` ended."""
        self.jobs.pop(job, None)
        self.limits.pop(job, None)

    def limit(self, job: str, limit_of: Callable[[str], float | None]) -> float | None:
        """The stale limit of ``job`` in seconds (None: never): ``limit_of(job)``, asked once while it lives."""
        if job not in self.limits:
            self.limits[job] = limit_of(job)
        return self.limits[job]

    def stale(self, limit_of: Callable[[str], float | None]) -> list[tuple[str, float, str, float]]:
        """``(job, idle seconds, last activity as ISO time, limit)`` of each job idle for its
        limit (:meth:`limit`) or more."""
        now = time.monotonic()
        return [(job, now - at, iso, limit) for job, (at, iso) in list(self.jobs.items())
                if (limit := self.limit(job, limit_of)) is not None and now - at >= limit]

    def describe(self, job: str) -> dict[str, object]:
        """``{last_activity_at, idle_seconds}`` of ``job`` (nulls when unknown)."""
        at, iso = self.jobs.get(job, (None, None))
        return {"last_activity_at": iso, "idle_seconds": None if at is None else round(time.monotonic() - at, 1)}


def stale_error(idle: float, where: str, since: str, limit: float) -> str:
    """The error of a job interrupted as stale: how long it was quiet and what it was doing."""
    return (f"stale: no activity for {idle:.0f}s (delegation.stale_after_seconds={limit:g}) while {where}; "
            f"last activity at {since}")
