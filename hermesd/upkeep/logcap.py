"""The daemon's backstop of the cap on each job's log (``logs.max_bytes``, ``logs.keep`` rotated copies).

The child holds the cap itself, whatever the writer's speed (:mod:`child.logwriter`:
its output through a size-capped writer of its own).  What is left to the daemon is
what was written before that writer started, or by a child that has none.
A child's stdout and stderr are ``jobs/ID/log`` (opened
``O_APPEND``; no pipe the daemon drains, a rule of the house), so the daemon
cannot meter the writes.  Instead :class:`LogCap` looks at the size of every
running child's log each ``logs.check_interval_seconds`` (one ``stat`` per
child, on the loop) and rotates a log past the cap by copy-truncate, the
method of logrotate's ``copytruncate`` for programs that keep their log open:

1. ``log.N-1`` → ``log.N`` … ``log.1`` → ``log.2`` (the oldest beyond ``keep`` goes);
2. the last ``max_bytes`` of ``log`` are copied to ``log.1`` (anything before
   them is dropped, and the line below says how much);
3. ``log`` is truncated to zero: the child's descriptor is ``O_APPEND``, so its
   next write lands at the new end, not at its old offset (no sparse file);
4. a line ``[hermesd …] log rotated …`` is appended, so the cap is visible
   in the log itself.

Steps 1-4 run in a worker thread (copying megabytes must not hold the loop).
What the child writes between the copy and the truncation is lost, as with
logrotate; a flooding child's log is bounded by ``max_bytes`` plus what it
writes in one check interval, and the folder by ``(keep + 1) ×`` that.
``keep: 0`` truncates without a copy.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from hermesd import clock
from hermesd.contract.launch import rotated_log

log = logging.getLogger("hermesd")
CHUNK = 1 << 20


def rotated(path: Path, n: int) -> Path:
    """``log.N``: the ``n``-th rotated copy of ``path`` (1 is the newest; :func:`hermesd.contract.launch.rotated_log`)."""
    return path.with_name(rotated_log(path.name, n))


def rotate(path: Path, max_bytes: int, keep: int) -> int:
    """Copy-truncate ``path`` when it is larger than ``max_bytes`` (see the module doc);
    returns the bytes it held (0: nothing done).  Blocking: call it off the loop.
    Raises ``OSError`` when the folder cannot be written."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size <= max_bytes:
        return 0
    dropped = size if keep == 0 else max(0, size - max_bytes)
    if keep:
        rotated(path, keep).unlink(missing_ok=True)
        for n in range(keep - 1, 0, -1):
            if rotated(path, n).exists():
                os.replace(rotated(path, n), rotated(path, n + 1))
        with open(path, "rb") as src, open(rotated(path, 1), "wb") as dst:
            src.seek(dropped)
            while chunk := src.read(CHUNK):
                dst.write(chunk)
    with open(path, "r+b") as fh:
        fh.truncate(0)
    where = f"the last {size - dropped} moved to {rotated(path, 1).name}" if keep else "dropped"
    note = (f"[hermesd {clock.now_iso()}] log rotated at {size} bytes (logs.max_bytes {max_bytes}, "
            f"logs.keep {keep}): {where}" + (f", the {dropped} before them dropped" if keep and dropped else "") + "\n")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.write(fd, note.encode())
    finally:
        os.close(fd)
    return size


class LogCap:
    """Every ``interval()`` seconds: rotate the logs of ``jobs()`` past ``limits()``
    (``(max_bytes, keep)``), each in a worker thread, one rotation per log at a time.
    ``log_path(job)`` is the log of a job."""

    def __init__(self, jobs: Callable[[], Iterable[str]], log_path: Callable[[str], Path],
                 limits: Callable[[], tuple[int, int]], interval: Callable[[], float],
                 loop: asyncio.AbstractEventLoop):
        self.jobs = jobs
        self.log_path = log_path
        self.limits = limits
        self.interval = interval
        self.loop = loop
        self.busy: set[str] = set()
        self.rotations = 0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Arm the timer."""
        self._handle = self.loop.call_later(self.interval(), self.check)

    def stop(self) -> None:
        """Disarm the timer (rotations under way finish on their own)."""
        if self._handle is not None:
            self._handle.cancel()

    def check(self) -> None:
        """One look at every running child's log (a ``stat`` each); re-arms the timer."""
        max_bytes, keep = self.limits()
        for job in list(self.jobs()):
            if job in self.busy:
                continue
            path = self.log_path(job)
            try:
                if path.stat().st_size <= max_bytes:
                    continue
            except OSError:
                continue
            self.busy.add(job)
            future = self.loop.run_in_executor(None, rotate, path, max_bytes, keep)
            future.add_done_callback(lambda f, job=job: self._done(job, f))
        self.start()

    def _done(self, job: str, future: Any) -> None:
        self.busy.discard(job)
        if future.exception() is not None:
            log.warning("could not rotate the log of %s: %s", job, future.exception())
        elif future.result():
            self.rotations += 1
