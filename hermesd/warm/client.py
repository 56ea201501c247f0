"""The daemon's side of warm start: it owns the zygote and the spares it forks.

The zygote (:mod:`hermesd.zygote`, whose doc tells the design) sends each
spare it forks to the daemon as ``{"spare": pid}`` with the write end of the
spare's request pipe (``SCM_RIGHTS``).  Starting a warm child is then one
write to that pipe, by the daemon, with no round trip through the zygote: the
spare wakes, sets itself up and says hello while the daemon records the
start.  For each spare it uses the daemon sends ``{"fork": 1, "held": n}``
(``n``: the spares it still holds), and the zygote forks a replacement.

A spare does not need its zygote once the daemon holds it: when the zygote
dies (the daemon learns it when it reaps it) the spares held are kept and
used, and a new zygote is started.  When no spare is held and the zygote is
not ready (warming up, dead), when it sends no spare within
:data:`hermesd.zygote.REPLY_TIMEOUT`, or where hermesd is not a subreaper,
:meth:`ZygoteClient.spawn` returns ``None`` and the child starts cold.  A
job handed to a spare is never also started cold, whatever happens to the
zygote afterwards.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from hermesd.prctl import is_subreaper
from hermesd.zygote import (ENTRY, ENV_ROOM_BYTES, PRELOAD, READY_TIMEOUT, REPLY_TIMEOUT, RESTART_AFTER, ROOM_ENV,
                            SPARES, hand_over, recv_msg, send_msg)

log = logging.getLogger("hermesd")


class ForkError(OSError):
    """The zygote could not fork a spare (``errno`` as ``fork(2)`` gave it)."""


@dataclass
class ForkedChild:
    """Handle of a warm child: its ``pid`` (``returncode`` is set by the reaper)."""

    pid: int
    returncode: int | None = None


class ZygoteClient:
    """The daemon's handle on its zygote and on the spares it holds.

    ``env``: the zygote's environment (see :mod:`hermesd.zygote`); ``preload``:
    modules it imports.  Nothing here blocks on the zygote warming up.
    ``spares`` holds ``(pid, fd, zygote)``: a spare, the write end of its pipe
    and the pid of the zygote that forked it.
    """

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = PRELOAD):
        # SPT_NOENV: setproctitle must leave the environment area alone (see hermesd.zygote)
        self.env = {**env, "SPT_NOENV": "1", ROOM_ENV: "." * ENV_ROOM_BYTES}
        self.preload = preload
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.info: dict[str, Any] | None = None
        self.spares: list[tuple[int, int, int]] = []
        self.asked = 0  # spares asked for and not yet received
        self._started = 0.0

    def start(self) -> None:
        """Start the zygote process (returns at once; it warms up on its own)."""
        self._stop_zygote()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hermesd.zygote", str(theirs.fileno()), ",".join(self.preload)],
                env=self.env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError as exc:
            ours.close()
            log.warning("warm start unavailable: cannot start the zygote: %s", exc)
            return
        finally:
            theirs.close()
        # A kernel timeout on a blocking socket, not Python's settimeout(): that one waits in
        # poll() and then reads, and the wake-up came 2-3 ms late on a busy 2-core machine.
        # A read that times out raises BlockingIOError, an OSError.
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(REPLY_TIMEOUT), 0))
        self.sock, self.info, self.asked = ours, None, SPARES  # the zygote sends SPARES after ready

    def ready(self) -> bool:
        """True once the zygote has said ready and is still there (never blocks)."""
        if self.sock is None:
            self._restart()
            return False
        try:
            self._receive(wait=False)
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            self._lost(exc)
            return False
        if self.info is None and time.monotonic() - self._started > READY_TIMEOUT:
            log.warning("warm start: zygote not ready after %.0fs; giving up on it", READY_TIMEOUT)
            self._stop_zygote()
        return self.info is not None

    def describe(self) -> dict[str, Any]:
        """``{"zygote": pid once ready else None, "spares": spares held}`` (for ``status``;
        takes what the zygote sent first, as :meth:`ready` does)."""
        self.ready()
        return {"zygote": (self.info or {}).get("pid"), "spares": len(self.spares)}

    def _receive(self, *, wait: bool) -> None:
        """Take what the zygote sent: its ready message, spares, fork errors.

        ``wait``: block (up to :data:`REPLY_TIMEOUT`) until a spare is held.
        Raises ``ConnectionError`` when the zygote went away, ``ForkError``
        when it could not fork while we wait, ``OSError`` (``BlockingIOError``
        on timeout), ``ValueError``/``msgpack.UnpackException`` for a message
        it cannot read.
        """
        while True:
            if wait and self.spares:
                return
            if not wait and not select.select([self.sock], [], [], 0)[0]:
                return
            got = recv_msg(self.sock)
            if got is None:
                raise ConnectionError("the zygote went away")
            msg, fds = got
            for extra in fds[1:]:
                os.close(extra)
            if not isinstance(msg, dict):
                raise ValueError(f"unexpected message from the zygote: {msg!r}")
            if msg.get("ready"):
                if self.info is not None:
                    raise ValueError("the zygote said ready twice")
                self.info = msg
                log.info("warm start ready: zygote pid %s, warmed up in %.2fs", msg.get("pid"), msg.get("seconds"))
            elif msg.get("spare") and fds:
                self.asked = max(0, self.asked - 1)
                self.spares.append((int(msg["spare"]), fds[0], int((self.info or {}).get("pid") or 0)))
            elif msg.get("error"):
                self.asked = max(0, self.asked - 1)
                error = ForkError(int(msg.get("errno") or 0), f"warm start: {msg['error']}")
                if wait:
                    raise error
                log.warning("%s", error)

    def _ask(self, more: int) -> None:
        """Ask for ``more`` spares, telling how many are held (none held: fork at once)."""
        send_msg(self.sock, {"fork": more, "held": len(self.spares)})
        self.asked += more

    def _replenish(self) -> None:
        """Ask for the spares missing to :data:`SPARES` held or coming; a zygote that
        cannot be asked is replaced (never raises: the job is handed over already)."""
        missing = SPARES - len(self.spares) - self.asked
        if missing <= 0 or self.sock is None or self.info is None:
            return
        try:
            self._ask(missing)
        except OSError as exc:
            self._lost(exc)

    def spawn(self, *, cwd: str, env: dict[str, str], log_path: str, entry: str = ENTRY) -> ForkedChild | None:
        """Start a warm child: hand the job to a spare; ``None`` to start it cold instead.

        ``None`` when no spare is held and the zygote is not ready, failed, or
        sent no spare in time (nothing was started; it is restarted later).  The child sets
        itself up after the handoff: the caller checks ``cwd`` and the log first
        (:class:`hermesd.procs.ForkServerOS`).  Raises nothing.
        """
        if not is_subreaper():
            return None
        self.ready()
        try:
            for _ in range(SPARES + 2):  # a spare that died meanwhile is replaced and skipped
                if not self.spares:
                    if self.info is None:  # no zygote ready (also one lost in this loop): cold
                        return None
                    self._ask(0 if self.asked else 1)  # none held: the zygote forks at once
                    self._receive(wait=True)
                pid, cmd, zygote = self.spares.pop(0)
                handed = hand_over(cmd, {"cwd": cwd, "env": env, "log_path": log_path, "entry": entry,
                                         "zygote": zygote})
                self._replenish()
                if handed:  # the spare sets itself up while the daemon commits the start
                    return ForkedChild(pid)
            log.warning("warm start: %d spares in a row were dead; starting the child cold", SPARES + 2)
        except ForkError as exc:  # the zygote is fine; the machine is short of something
            log.warning("%s; starting the child cold", exc)
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            self._lost(exc)
        return None

    def _restart(self) -> None:
        """Start a new zygote, unless the last one started less than :data:`RESTART_AFTER` ago."""
        if time.monotonic() - self._started >= RESTART_AFTER:
            self.start()

    def reaped(self, exits: list[tuple[int, int]]) -> None:
        """The daemon reaped ``exits`` (``(pid, returncode)``): a zygote among them is replaced now."""
        for pid, code in exits:
            if self.proc is not None and pid == self.proc.pid:
                self.proc.returncode = code  # reaped: subprocess must not wait or signal again
                try:  # what it sent before it died (its ready message, spares) is still ours
                    self._receive(wait=False)
                except (OSError, ValueError, msgpack.UnpackException):
                    pass  # its end of file, or a message cut short
                self._lost(f"pid {pid} exited with status {code}")

    def _lost(self, why: object) -> None:
        """The zygote died or broke: replace it (at once if it had been warm, else not in a
        loop); the spares held are kept."""
        log.warning("warm start: zygote lost (%s); %d spare(s) held, then children start cold until it "
                    "is back", why, len(self.spares))
        was_ready = self.info is not None
        self._stop_zygote()
        if was_ready:
            self.start()
        else:
            self._restart()

    def close(self) -> None:
        """Stop the zygote and let the spares go (each reads end of file and exits)."""
        for _, cmd, _ in self.spares:
            os.close(cmd)
        self.spares = []
        self._stop_zygote()

    def _stop_zygote(self) -> None:
        """Stop the zygote (its end of the socket closes; SIGKILL to be sure); spares stay."""
        self.asked = 0
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass
            self.proc = None
        self.info = None
