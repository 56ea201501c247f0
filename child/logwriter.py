"""The child's log through a size-capped writer: ``logs.max_bytes`` holds whatever the writer's speed.

The daemon opens ``jobs/ID/log`` as the child's stdout and stderr and cannot meter
what is written there (it reads no pipe of a child's: a rule of the house); its own
cap (:mod:`hermesd.upkeep.logcap`) looks on a timer, so a flood outran it.  So the
child, first thing, puts a pipe in place of its descriptors 1 and 2 — inherited by
everything it starts, a tool's commands and what they leave behind included — and a
thread of its own copies the pipe into the log, rotating before a write would take
the log past ``max_bytes`` (its cap arrives in :data:`hermesd.contract.launch.LOG_CAP_ENV`):

1. ``log.KEEP`` goes, ``log.N`` becomes ``log.N+1``, ``log`` becomes ``log.1``
   (a rename: the writer alone has the log open); ``keep: 0`` empties ``log`` instead;
2. a new ``log`` starts with a line ``[hermes-child …] log rotated …``.

So the folder never holds more than ``(keep + 1) × max_bytes`` and the rotation lines.
The copy is synchronous (a write waits for the thread), so the log is as current as
before; a native crash's stack (``faulthandler``) goes to the log itself, not through
the pipe, and at the end of the job :meth:`CappedLog.close` puts the log back on 1 and
2 and copies what is left in the pipe.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from hermesd.contract.launch import LOG_CAP_ENV, rotated_log

CHUNK = 1 << 16
DRAIN_SECONDS = 0.5
"""How long :meth:`CappedLog.close` waits for what is still in the pipe."""


def parse(value: str | None) -> tuple[int, int] | None:
    """``"MAX_BYTES:KEEP"`` → ``(max_bytes, keep)``; None when unset or not two integers
    (``max_bytes`` ≥ 1, ``keep`` ≥ 0)."""
    try:
        size, keep = (int(v) for v in (value or "").split(":"))
    except ValueError:
        return None
    return (size, keep) if size >= 1 and keep >= 0 else None


class CappedLog:
    """Descriptors 1 and 2 of this process, copied into the log at ``path`` (the file they
    were) under ``max_bytes`` with ``keep`` rotated copies (see the module doc)."""

    def __init__(self, path: str, max_bytes: int, keep: int):
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        self.fd = os.dup(1)  # the log, O_APPEND, as the daemon or the spare opened it
        os.set_inheritable(self.fd, False)
        self.size = os.fstat(self.fd).st_size
        self.file: Any = os.fdopen(os.dup(self.fd), "w", closefd=True)  # for faulthandler: the log itself
        read, write = os.pipe()
        os.set_inheritable(read, False)
        self.read = read
        os.dup2(write, 1)
        os.dup2(write, 2)
        os.close(write)
        self.thread = threading.Thread(target=self._copy, name="hermes-log", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        while True:
            try:
                data = os.read(self.read, CHUNK)
            except OSError:
                return
            if not data:
                return
            try:
                self.write(data)
            except OSError:
                pass  # the folder cannot be written: the bytes go, the job goes on

    def write(self, data: bytes) -> None:
        """Append ``data`` to the log, rotating first whenever it would pass ``max_bytes``."""
        while data:
            if self.size >= self.max_bytes:
                self.rotate()
            room = max(1, self.max_bytes - self.size)
            os.write(self.fd, data[:room])
            self.size += min(room, len(data))
            data = data[room:]

    def rotate(self) -> None:
        """Step 1 and 2 of the module doc."""
        size = self.size
        if self.keep:
            directory, name = os.path.split(self.path)
            try:
                os.unlink(os.path.join(directory, rotated_log(name, self.keep)))
            except FileNotFoundError:
                pass
            for n in range(self.keep - 1, 0, -1):
                older = os.path.join(directory, rotated_log(name, n))
                if os.path.exists(older):
                    os.replace(older, os.path.join(directory, rotated_log(name, n + 1)))
            os.replace(self.path, os.path.join(directory, rotated_log(name, 1)))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.dup2(fd, self.fd, inheritable=False)
            os.dup2(fd, self.file.fileno(), inheritable=False)
            os.close(fd)
            where = f"moved to {rotated_log(name, 1)}"
        else:
            os.ftruncate(self.fd, 0)
            where = "dropped"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        note = (f"[hermes-child {stamp}] log rotated at {size} bytes (logs.max_bytes {self.max_bytes}, "
                f"logs.keep {self.keep}): {where}\n").encode()
        os.write(self.fd, note)
        self.size = len(note)

    def close(self) -> None:
        """The end of the job: the log back on descriptors 1 and 2 (this process's last words
        go there directly), then what is still in the pipe copied (at most
        :data:`DRAIN_SECONDS`: a process the job left may still hold the pipe open)."""
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)
        self.thread.join(DRAIN_SECONDS)


def capture() -> CappedLog | None:
    """Put this process's output under the cap in :data:`hermesd.contract.launch.LOG_CAP_ENV`
    (see the module doc); None (nothing changed) without one, or when descriptor 1 is
    not a regular file (a test's pipe, a terminal)."""
    cap = parse(os.environ.get(LOG_CAP_ENV))
    if cap is None:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(1).st_mode):
            return None
        return CappedLog(os.readlink("/proc/self/fd/1"), *cap)
    except OSError:
        return None
