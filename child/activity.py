"""What a child is doing, and when it last showed life: the source of its liveness reports.

hermesd interrupts a child that shows no activity for
``delegation.stale_after_seconds`` (:mod:`hermesd.liveness`).  Activity is a
model call starting or ending, a streamed event of a model reply, a tool
starting or ending, and output of a running tool.  Any thread may
:meth:`Activity.touch` (the model call runs in a worker thread and touches per
streamed event); only the main thread sends reports (the channel is not
thread-safe): :meth:`Activity.tick` sends one ``child.progress`` with the
latest activity when something happened since the last report and at least
:data:`REPORT_INTERVAL_SECONDS` passed — so a long stream is reported, throttled.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

REPORT_INTERVAL_SECONDS = 2.0
"""Least seconds between two throttled activity reports of one child (the job spec's
``activity_interval_seconds``: hermesd makes it at most a quarter of ``stale_after_seconds``)."""


class Activity:
    """The latest activity of one run.

    ``report(what)``: sends one progress report saying ``what`` (a short text
    such as ``"streaming the model's reply (turn 3)"``); called on the main
    thread by :meth:`tick` and :meth:`begin`.
    """

    def __init__(self, report: Callable[[str], None] | None = None,
                 interval: float = REPORT_INTERVAL_SECONDS):
        self._report = report
        self._interval = interval
        self._lock = threading.Lock()
        self._what = "starting"
        self._count = 0
        self._reported_count = 0
        self._reported_at = time.monotonic()

    @property
    def what(self) -> str:
        """The latest activity's text."""
        with self._lock:
            return self._what

    def touch(self, what: str | None = None) -> None:
        """Record activity (any thread); ``what`` replaces the text when given."""
        with self._lock:
            if what:
                self._what = what
            self._count += 1

    def begin(self, what: str) -> None:
        """Main thread: something new starts (a model call, a tool): record and report it now."""
        self.touch(what)
        self._send()

    def tick(self) -> None:
        """Main thread: report the latest activity if there was some since the last
        report and :data:`REPORT_INTERVAL_SECONDS` passed."""
        with self._lock:
            due = self._count != self._reported_count and time.monotonic() - self._reported_at >= self._interval
        if due:
            self._send()

    def _send(self) -> None:
        with self._lock:
            self._reported_count, self._reported_at, what = self._count, time.monotonic(), self._what
        if self._report is not None:
            self._report(what)
