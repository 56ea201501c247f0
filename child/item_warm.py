"""Warm starts for batch items on a Ray cluster: a zygote per item host.

An item host (:class:`child.item_host.ItemHost`, a Ray actor: one long-lived Ray worker
process) runs item after item, several at once.  Its first item starts the same warm
template hermesd uses (:mod:`child.zygote`) as a child of the host, with the host in the
role of the daemon, and waits for its first spare (:data:`WARM_WAIT_SECONDS` at most)
rather than starting cold beside it: a cold start (``python -m child``,
:func:`child.item.run_item`) would import the same modules on the same cores while the
zygote does.  The zygote imports the child runtime, the SDK of the item's provider and
:mod:`child.item` (the file channel), and keeps as many spares as the host has slots
(:func:`keep_spares`), forked *beside itself*
(:func:`child.spare.fork_beside`: ``clone(CLONE_PARENT)``), so that each spare is a
child of the host — which waits for it, signals its process group, and whose death
kills it (``PDEATHSIG``), exactly as for a cold item.  Each item is handed to a held
spare with one write (:func:`hermesd.warm.wire.write_request`): the job's working
directory, log and environment (``HERMES_LIFELINE_PID``: the host), each item still in a
session and process group of its own; when every spare is taken, the next item waits for
the one the zygote forks for it.

The zygote dies with its host (``PDEATHSIG``); a zygote that died or did not warm up in
time, a spare that died, or one not ours (the double fork: no subreaper here) means a cold
start.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hermesd.contract.launch import PYTHON
from hermesd.warm.wire import (ENV_ROOM_BYTES, PROVIDERS_ENV, ROOM_ENV, SPARES, TITLE_ROOM, recv_msg, send_msg,
                               write_request)

WARM_WAIT_SECONDS = 30.0  # how long an item waits for its worker's zygote to warm up, in seconds


class WarmItem:
    """A warm item: a child of this process (``pid``), with the calls of ``subprocess.Popen``
    that :func:`child.item.run_item` uses (``wait``, ``send_signal``, ``returncode``)."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the item's exit (``timeout`` seconds at most: ``subprocess.TimeoutExpired``)."""
        if self.returncode is not None:
            return self.returncode
        if timeout is not None:
            fd = os.pidfd_open(self.pid)
            try:
                if not select.select([fd], [], [], timeout)[0]:
                    raise subprocess.TimeoutExpired(["hermes-item"], timeout)
            finally:
                os.close(fd)
        try:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped by someone else: the result file tells the rest
            self.returncode = -1
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """``kill(pid, sig)`` while it lives."""
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class WorkerTemplate:
    """The zygote of this Ray worker process and the spares it sent (see the module doc)."""

    def __init__(self, env: dict[str, str], provider: str):
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen | None = None
        self.provider = provider
        self.ready, self.zygote, self.fork_failed = False, 0, False
        self.owed = 0  # spares asked for and not received yet
        self.spares: list[tuple[int, int, int]] = []  # (pid, request pipe's write end, zygote pid)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**env, PROVIDERS_ENV: provider, "HERMES_DAEMON_PID": str(os.getpid()), "SPT_NOENV": "1",
               ROOM_ENV: "." * ENV_ROOM_BYTES}
        try:
            self.proc = subprocess.Popen([*PYTHON, "-m", "child.zygote", str(theirs.fileno()), "+child.item", "." * TITLE_ROOM],
                                         env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        except (OSError, ValueError) as exc:
            print(f"hermes-item: no warm template on this worker: {exc}", file=sys.stderr, flush=True)
            ours.close()
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours

    def alive(self) -> bool:
        """Whether the zygote still runs."""
        return self.sock is not None and self.proc is not None and self.proc.poll() is None

    def _receive(self) -> None:
        """Take the messages waiting (ready, spares); never waits."""
        while self.sock is not None:
            try:
                got = recv_msg(self.sock)
            except BlockingIOError:
                return
            except (OSError, ValueError):
                self.close()
                return
            if got is None:
                self.close()
                return
            msg, fds = got
            if isinstance(msg, dict) and msg.get("ready"):
                self.ready, self.zygote = True, int(msg.get("pid") or 0)
            elif isinstance(msg, dict) and msg.get("spare") and fds:
                self.spares.append((int(msg["spare"]), fds[0], self.zygote))
                self.owed = max(0, self.owed - 1)
            else:
                if isinstance(msg, dict) and msg.get("error"):
                    self.fork_failed, self.owed = True, max(0, self.owed - 1)
                for fd in fds:
                    os.close(fd)

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the zygote's first spare while it warms up; returns early
        when a spare arrives, a fork failed, or the zygote died (then closed: the item starts cold)."""
        deadline, self.fork_failed = time.monotonic() + seconds, False
        while (self.sock is not None and not self.spares and not self.fork_failed
               and (left := deadline - time.monotonic()) > 0):
            if select.select([self.sock], [], [], min(left, 0.5))[0]:
                self._receive()
            elif not self.alive():
                self.close()

    def start(self, *, cwd: str, env: dict[str, str], log_path: str) -> WarmItem | None:
        """Hand the item to a held spare that is a child of this process; None to start it cold."""
        self._receive()
        if not self.spares:  # warming up, or all taken (items started at once on a host): one is forked now
            self._replenish()
            self.wait(WARM_WAIT_SECONDS)
        try:
            while self.spares:
                pid, fd, zygote = self.spares.pop(0)
                if _parent_of(pid) != os.getpid():  # double-forked (no CLONE_PARENT here): not ours to wait for
                    os.close(fd)
                    _kill(pid)
                    continue
                if write_request(fd, {"cwd": cwd, "env": env, "log_path": log_path, "zygote": zygote}):
                    return WarmItem(pid)
            return None
        finally:
            self._replenish()

    def _replenish(self) -> None:
        if self.sock is None or not self.ready:
            return
        more = max(0, _spares - len(self.spares) - self.owed)
        if not more:
            return
        try:
            send_msg(self.sock, {"fork": more, "held": len(self.spares)})
            self.owed += more
        except BlockingIOError:
            pass
        except OSError:
            self.close()

    def close(self) -> None:
        """Stop the zygote and let the spares held go (they exit when their pipes close)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        for _, fd, _ in self.spares:
            os.close(fd)
        self.spares = []
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_template: WorkerTemplate | None = None
_lock = threading.Lock()  # an item host (child.item_host) starts items from several threads
_spawner = ThreadPoolExecutor(1, thread_name_prefix="hermes-zygote-start")
"""The thread that starts the zygote, alive as long as this process.  The zygote and its spares
(forked beside it: the same parent) die by ``PDEATHSIG`` when the *thread* that started the zygote
ends (prctl(2), ``PR_SET_PDEATHSIG``), and an item host's threads come and go."""
_spares = SPARES


def keep_spares(n: int) -> None:
    """Have this worker's template hold ``n`` spares (at least :data:`SPARES`): as many as
    items may start here at once (an item host's slots)."""
    global _spares
    _spares = max(SPARES, n)


@atexit.register
def _close_template() -> None:
    if _template is not None:
        _template.close()


def template_for(env: dict[str, str], provider: str) -> WorkerTemplate:
    """This worker's template for ``provider``, started now when there is none, or it died,
    or it was made for another provider (:meth:`WorkerTemplate.start` then waits for it)."""
    global _template
    if _template is None or not _template.alive() or _template.provider != provider:
        if _template is not None:
            _template.close()
        _template = _spawner.submit(WorkerTemplate, env, provider).result()
    return _template


def start_warm(*, cwd: str, env: dict[str, str], log_path: str, provider: str, base_env: dict[str, str]) -> Any:
    """A warm item (:class:`WarmItem`) from this worker's template, or None (start it cold)."""
    with _lock:
        return template_for(base_env, provider).start(cwd=cwd, env=env, log_path=log_path)
