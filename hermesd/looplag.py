"""An event-loop lag probe, for benchmarks: how late the loop runs a timer.

Enabled by ``HERMES_LOOP_LAG_MS=<interval>`` in the daemon's environment (off
by default: a timer every few milliseconds costs CPU).  A task sleeps
``interval`` ms again and again; each wake-up later than asked is the time
the loop could not run anything else — a handler that blocked, a long
commit, or the process not scheduled (the method of Node's
``monitorEventLoopDelay`` and of asyncio's slow-callback warning, which time
the loop from inside).  ``status`` reports it as ``loop_lag``
(:meth:`LoopLag.describe`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from typing import Any

log = logging.getLogger("hermesd")
ENV = "HERMES_LOOP_LAG_MS"
KEEP = 4096
"""Lags above :data:`NOTED_MS` kept (the most recent), with when they ended."""
NOTED_MS = 1.0


class LoopLag:
    """The probe: ``interval`` in seconds between samples."""

    def __init__(self, interval: float):
        self.interval = interval
        self.samples = 0
        self.max = 0.0
        self.stalls: collections.deque[tuple[float, float]] = collections.deque(maxlen=KEEP)

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            asked = time.monotonic()
            await asyncio.sleep(self.interval)
            now = time.monotonic()
            lag = max(0.0, now - asked - self.interval)
            self.samples += 1
            self.max = max(self.max, lag)
            if lag * 1000 > NOTED_MS:
                self.stalls.append((now, lag))

    def describe(self) -> dict[str, Any]:
        """``{"interval_ms", "samples", "max_ms", "stalls": [[monotonic seconds at its end,
        lag ms], …]}``; times are ``CLOCK_MONOTONIC``, comparable across processes."""
        return {"interval_ms": self.interval * 1000, "samples": self.samples, "max_ms": self.max * 1000,
                "stalls": [[t, lag * 1000] for t, lag in self.stalls]}


def from_env(env: dict[str, str] | None = None) -> LoopLag | None:
    """The probe :data:`ENV` asks for, or ``None`` (also for a value that is not a positive
    number of milliseconds: logged, the daemon runs without the probe)."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    if not value:
        return None
    try:
        interval = float(value)
    except ValueError:
        interval = -1.0
    if not interval > 0:
        log.error("%s=%r: expected a positive number of milliseconds; no loop lag probe", ENV, value)
        return None
    return LoopLag(interval / 1000)
