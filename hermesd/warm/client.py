"""The daemon's side of warm start: it owns the zygote and the spares it forks.

The zygote (:mod:`child.zygote`) sends each spare it forks to the daemon as
``{"spare": pid}`` with the write end of the spare's request pipe
(``SCM_RIGHTS``; the wire is :mod:`hermesd.warm.wire`).  Starting a warm child
is then one write to that pipe, by the daemon, with no round trip through the
zygote: the spare wakes, sets itself up and says hello while the daemon
records the start.  For each spare it uses the daemon sends ``{"fork": n,
"held": n}`` and the zygote forks replacements.

Nothing here blocks the event loop.  The zygote's socket is non-blocking and
read when the loop reports it readable (``loop.add_reader``): its ready
message, the spares and fork errors arrive while the daemon serves other
requests.  :meth:`ZygoteClient.spawn` hands the job to a held spare, or
returns ``None`` at once (the job starts cold) and asks for spares, which
catch up in the background.  Timers (not requests) restart a lost zygote and
give up on one that does not get warm; :meth:`ZygoteClient.describe` only reads.

A job type that starts many alike jobs (batch) may wait instead:
:meth:`ZygoteClient.at_hand` says whether a start now would be warm or a spare
is on its way, and the :attr:`~ZygoteClient.listeners` hear when it arrives.
The zygote imports the SDKs of the providers in use only; :meth:`ZygoteClient.preload`
asks it for another one when a job first uses it.

A spare does not need its zygote once the daemon holds it: when the zygote
dies (the daemon learns it from the socket's end of file or when it reaps
it) the spares held are kept and used, and a new zygote is started.  A job
handed to a spare is never also started cold, whatever happens to the zygote
afterwards.  When the zygote cannot start (hermesd is no child subreaper, the
program cannot run, it exits or stays cold), children start cold and
``describe()`` says why (``cold_reason``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

import msgpack

from hermesd.contract.launch import PYTHON
from hermesd.system.prctl import is_subreaper
from hermesd.warm.wire import ENV_ROOM_BYTES, ROOM_ENV, SPARES, TITLE_ROOM, recv_msg, send_msg, write_request

log = logging.getLogger("hermesd")

COMMAND = (*PYTHON, "-m", "child.zygote")
"""The zygote's program; its arguments are the socket's descriptor number, the modules to
preload (comma-separated; ``-``: its own list) and room for a child's title."""
READY_TIMEOUT = 120.0
"""Seconds a zygote may take to get warm before it is given up (and tried again)."""
RESTART_AFTER = 10.0
"""Seconds between two starts of a zygote that does not get warm or keeps dying."""
SPARE_WAIT = 0.5
"""Seconds a start may wait for a spare on its way before :meth:`ZygoteClient.at_hand` says
waiting is pointless (a zygote too slow or stuck: a cold start is then as good)."""
_BROKEN = (OSError, ValueError, msgpack.UnpackException)
"""What reading or writing the zygote's socket raises when the zygote broke."""


@dataclass
class ForkedChild:
    """Handle of a warm child: its ``pid`` (``returncode`` is set by the reaper)."""

    pid: int
    returncode: int | None = None


@dataclass
class HeldSpare:
    """A spare the daemon holds: its ``pid``, ``fd`` (write end of its request pipe) and
    the pid of the ``zygote`` that forked it."""

    pid: int
    fd: int
    zygote: int


class ZygoteClient:
    """The daemon's handle on its zygote and on the spares it holds.

    ``env``: the zygote's environment; ``loop``: the daemon's event loop (the
    socket is read from it, timers run on it); ``command`` and ``preload``:
    the zygote's program (default :data:`COMMAND`) and the modules it imports
    (default: its own list, and ``more``).  Nothing here waits for the zygote.
    """

    def __init__(self, env: dict[str, str], loop: Any, *, command: tuple[str, ...] = COMMAND,
                 preload: tuple[str, ...] | None = None, more: tuple[str, ...] = ()):
        # SPT_NOENV: setproctitle must leave the environment area alone (see child.zygote)
        self.env = {**env, "SPT_NOENV": "1"}  # and the room (ROOM_ENV), made at each start only
        self.loop = loop
        modules = ("+" + ",".join(more) if more else "-") if preload is None else ",".join(preload)
        self.argv = [*command, "{fd}", modules, "." * TITLE_ROOM]
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.info: dict[str, Any] | None = None
        self.spares: list[HeldSpare] = []
        self.asked = 0  # spares asked for and not yet received
        self.cold_reason: str | None = None
        self.closed = False
        self._started = -RESTART_AFTER
        self._timer: Any = None  # the ready deadline, or the next start
        self.listeners: list[Callable[[], None]] = []  # told when at_hand() may have turned true
        self.preloaded: set[str] = set()  # providers the zygote was asked to import (this zygote)
        self._empty_since: float | None = None  # when a start last found no spare (none arrived since)
        self._wait_timer: Any = None

    # starting and stopping -------------------------------------------------

    def start(self) -> None:
        """Start the zygote process; returns at once (it warms up on its own).

        When it cannot start, ``cold_reason`` says why and a new try is timed.
        """
        self._stop_zygote()
        if self.closed:
            return
        if not is_subreaper():
            self.cold_reason = "hermesd is not a child subreaper here, so it could not reap warm children"
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._started = time.monotonic()
        argv = [a.replace("{fd}", str(theirs.fileno())) for a in self.argv]
        env = {**self.env, ROOM_ENV: "." * ENV_ROOM_BYTES}  # not held between starts: 64 KiB of an idle daemon
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd="/", stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                                         start_new_session=True)
        except (OSError, ValueError) as exc:
            ours.close()
            self._cold(f"cannot start the zygote: {exc}")
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock, self.info, self.asked = ours, None, SPARES  # the zygote sends SPARES after ready
        self.preloaded = set()
        self.loop.add_reader(ours.fileno(), self._on_readable)
        self._timer = self.loop.call_later(READY_TIMEOUT, self._not_warm)

    def close(self) -> None:
        """Stop the zygote and the spares held (at shutdown); nothing is started again."""
        self.closed = True
        for spare in self.spares:
            os.close(spare.fd)  # its end of file tells it to exit; SIGKILL to be sure
            with contextlib.suppress(OSError):
                os.kill(spare.pid, signal.SIGKILL)  # held, so not reaped yet: the pid is still its own
        self.spares = []
        self._stop_zygote()

    def _stop_zygote(self) -> None:
        """Stop the zygote (its socket closed, SIGKILL); the spares held stay."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.asked = 0
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            if self.proc.returncode is None:
                with contextlib.suppress(OSError):
                    self.proc.kill()
                # the daemon's reaper collects it; subprocess must never wait for this pid
                # (it could be a job's child by then)
                self.proc.returncode = -signal.SIGKILL
            self.proc = None
        self.info = None

    def _cold(self, why: str) -> None:
        """The zygote could not start or get warm: children start cold; try again later."""
        self.cold_reason = f"{why}; children start cold, next try in {RESTART_AFTER:.0f}s"
        log.warning("warm start: %s", self.cold_reason)
        self._stop_zygote()
        self._at_hand_again()
        if not self.closed:
            self._timer = self.loop.call_later(RESTART_AFTER, self.start)

    def _not_warm(self) -> None:
        self._timer = None
        self._cold(f"the zygote was not warm after {READY_TIMEOUT:.0f}s")

    def _lost(self, why: object) -> None:
        """The zygote died or broke: replace it (at once if it had been warm, else after
        :data:`RESTART_AFTER`); the spares held are kept."""
        if self.info is None:
            self._cold(f"the zygote stopped before it was warm ({why})")
            return
        log.warning("warm start: zygote lost (%s); %d spare(s) held, then children start cold until it "
                    "is back", why, len(self.spares))
        self._stop_zygote()
        self._at_hand_again()
        if not self.closed:
            self.start()

    # what the zygote sends ----------------------------------------------------

    def _on_readable(self) -> None:
        """The loop saw the zygote's socket readable: take everything it sent."""
        try:
            if not self._receive():
                why = "it closed its socket"
                if self.proc is not None and self.proc.poll() is not None:  # our own zygote's pid: safe
                    why = f"pid {self.proc.pid} exited with status {self.proc.returncode}"
                self._lost(why)
        except _BROKEN as exc:
            self._lost(exc)

    def _receive(self) -> bool:
        """Take every message waiting: the ready message, spares, fork errors.

        Returns False at the zygote's end of file.  Raises ``OSError``,
        ``ValueError`` or ``msgpack.UnpackException`` for a broken socket or a
        message it cannot read.
        """
        while self.sock is not None:
            try:
                got = recv_msg(self.sock)
            except BlockingIOError:
                return True
            if got is None:
                return False
            msg, fds = got
            for extra in fds[1:]:
                os.close(extra)
            if not isinstance(msg, dict):
                raise ValueError(f"unexpected message from the zygote: {msg!r}")
            if msg.get("ready"):
                if self.info is not None:
                    raise ValueError("the zygote said ready twice")
                self.info, self.cold_reason = msg, None
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                log.info("warm start ready: zygote pid %s, warmed up in %.2fs", msg.get("pid"), msg.get("seconds"))
            elif msg.get("spare") and fds:
                self.asked = max(0, self.asked - 1)
                self.spares.append(HeldSpare(int(msg["spare"]), fds[0], int((self.info or {}).get("pid") or 0)))
                self._at_hand_again()
            elif msg.get("error"):
                self.asked = max(0, self.asked - 1)
                log.warning("warm start: %s (errno %s); asked again at the next start", msg["error"],
                            msg.get("errno"))
        return True

    def reaped(self, exits: list[tuple[int, int]]) -> None:
        """The daemon reaped ``exits`` (``(pid, returncode)``): a zygote among them is
        replaced (what it sent before it died is kept), a held spare among them dropped."""
        for pid, code in exits:
            if self.proc is not None and pid == self.proc.pid:
                self.proc.returncode = code  # reaped: subprocess must not wait or signal again
                with contextlib.suppress(*_BROKEN):
                    self._receive()  # its ready message and spares are still ours
                self._lost(f"pid {pid} exited with status {code}")
                continue
            for spare in [s for s in self.spares if s.pid == pid]:
                os.close(spare.fd)
                self.spares.remove(spare)
                log.warning("warm start: a held spare (pid %d) exited with status %d", pid, code)

    # handing out spares --------------------------------------------------------

    def spawn(self, *, cwd: str, env: dict[str, str], log_path: str) -> ForkedChild | None:
        """Hand a job to a held spare; ``None`` to start it cold instead (at once).

        Never waits: with no spare held (the zygote warming, dead, or slower than
        the requests) it returns ``None`` and asks the zygote for spares.  The
        child sets itself up after the handoff: the caller checks ``cwd`` and the
        log first (:class:`hermesd.warm.spawner.WarmSpawner`).  Raises nothing.
        """
        if not self.spares and self.sock is not None:
            self._on_readable()  # one that arrived since the loop last looked (never waits)
        try:
            while self.spares:  # a spare that died unseen is skipped (its pipe is closed)
                spare = self.spares.pop(0)
                if write_request(spare.fd, {"cwd": cwd, "env": env, "log_path": log_path,
                                            "zygote": spare.zygote}):
                    return ForkedChild(spare.pid)
            self._empty_since = self._empty_since or time.monotonic()
            return None
        finally:
            self._replenish()

    def _replenish(self) -> None:
        """Ask for the spares missing to :data:`SPARES` held or coming (none held: the
        zygote forks at once); a zygote that cannot be asked is replaced."""
        missing = SPARES - len(self.spares) - self.asked
        if missing <= 0 or self.sock is None or self.info is None:
            return
        try:
            send_msg(self.sock, {"fork": missing, "held": len(self.spares)})
        except BlockingIOError:
            return  # its queue is full: asked again at the next start
        except OSError as exc:
            self._lost(exc)
            return
        self.asked += missing

    def preload(self, provider: str | None) -> None:
        """Ask the zygote, once per provider, to import ``provider``'s SDK, so that the spares
        it forks from then on have it (it imports only its config's providers at start).
        A job with no provider of its own gets the default, which the zygote has.  Never waits."""
        if not provider or provider in self.preloaded or self.sock is None or self.info is None:
            return
        try:
            send_msg(self.sock, {"preload": provider})
        except BlockingIOError:
            return  # asked again by the next job
        except OSError as exc:
            self._lost(exc)
            return
        self.preloaded.add(provider)

    def at_hand(self) -> bool:
        """True when a job started now starts warm (a spare held), or when waiting would
        not make it warm: no zygote warm (starting, dead, given up), or none of the
        spares asked for arrived within :data:`SPARE_WAIT` of the first start that found
        none.  When it says False, :attr:`listeners` are called once it may be true
        again (a spare arrived, the zygote was lost, or that wait ran out).  Only reads
        and sets a timer; never waits."""
        if self.spares or self.info is None or self.sock is None:
            return True
        now = time.monotonic()
        self._empty_since = self._empty_since or now
        if now - self._empty_since >= SPARE_WAIT:
            return True
        if self._wait_timer is None:  # also marks that someone waits
            self._wait_timer = self.loop.call_later(SPARE_WAIT - (now - self._empty_since) + 0.001,
                                                    self._at_hand_again)
        return False

    def _at_hand_again(self) -> None:
        """:meth:`at_hand` may be true again: tell the listeners, if it said False since the
        last time (from the loop, later: this may run inside a start)."""
        if self.spares:
            self._empty_since = None
        if self._wait_timer is None:
            return  # no one was told to wait
        self._wait_timer.cancel()
        self._wait_timer = None
        for callback in self.listeners:
            self.loop.call_soon(callback)

    def own_pids(self) -> frozenset[int]:
        """The zygote's pid (its subtree: spares on their way to the daemon) and the held
        spares' (waiting for a job, so no job's yet)."""
        zygote = {self.proc.pid} if self.proc is not None else set()
        return frozenset(zygote | {s.pid for s in self.spares})

    def describe(self) -> dict[str, Any]:
        """``{"zygote": pid once warm else None, "spares": held}``, and ``cold_reason`` when
        the zygote could not start (for ``status``; only reads)."""
        out: dict[str, Any] = {"zygote": (self.info or {}).get("pid"), "spares": len(self.spares)}
        if self.cold_reason:
            out["cold_reason"] = self.cold_reason
        return out
