"""Warm start: a template process ("zygote") that forks children already warm.

A cold child (``python -m child``) pays for a new interpreter and for its
imports (zmq, msgpack, the agent runtime, ``import anthropic`` ~1.4 s) every
time.  With ``supervisor.start_method: forkserver`` hermesd starts one zygote,
``python -m hermesd.zygote``, which imports the child runtime and the provider
SDKs once, freezes those objects out of the garbage collector (so that forked
children share their pages copy-on-write) and then forks a child per request.

Who is whose parent — the design in one paragraph.  A child forked directly
by the zygote would have the zygote as its parent: its ``PR_SET_PDEATHSIG``
would fire when the *zygote* dies rather than the daemon, and the daemon could
not ``waitpid`` it.  So the zygote double-forks: it forks an intermediate
process, which forks the child and exits at once.  The orphaned child is
re-parented by the kernel to the nearest child subreaper above it — hermesd,
which is one (``PR_SET_CHILD_SUBREAPER``) — and only *then* arms its lifeline
against the daemon's pid (arming before would fire when the intermediate
exits).  From there on a warm child is indistinguishable from a cold one for
the daemon: its parent is hermesd, hermesd reaps it through ``SIGCHLD`` and
learns its exit status, ``killpg(pid)`` reaches its process group, and
``PDEATHSIG`` fires when hermesd dies.  When the daemon is not a subreaper
(not Linux) the warm path is not used.

Forks cost milliseconds (two page-table copies of a ~100 MB process), so the
zygote keeps :data:`SPARES` children forked ahead of time: each has left the
zygote's session, belongs to the daemon, has armed ``PDEATHSIG`` (SIGKILL),
redone its process state and connected to the daemon's ``children.sock``
(:data:`PREPARE`), and waits on a pipe for its job.  A request writes the job
to a spare's pipe and is answered with the spare's pid at once; the spare sets
up its directory, log and environment while the daemon records the start.  A
used spare is replaced :data:`REPLENISH_DELAY` after the daemon asked (at once
when it holds none), so that the fork does not compete with the child just
started; a steady stream of requests still gets its spares.  A spare sent to the
daemon no longer needs the zygote: it outlives it, and exits when the daemon
closes its pipe (end of file) or dies (lifeline).

What a forked child must not share with the zygote, and where it is redone:

* session and process group — ``setsid()`` in the spare (it leads both);
* working directory, stdin (``/dev/null``), stdout/stderr (the job's log,
  appended), environment (``os.environ`` replaced, ``putenv`` included);
* file descriptors — every inherited descriptor is closed (as ``close_fds``);
* RNG state — ``random`` reseeded, entropy mixed into OpenSSL's pool;
* event loop and zmq context — the zygote creates neither (it only imports);
  the asyncio policy and a ``zmq.Context.instance()`` are reset anyway, and
  the child's :class:`child.channel.Channel` makes its own context;
* signal dispositions — back to the defaults of a fresh interpreter;
* process title and lifeline — done by the child entry (``child.__main__``).

``/proc/PID/environ`` needs care: the kernel shows the memory area the
environment had at ``exec`` time — in a forked child, the *zygote's*.  Leftover
sweeps find a job's processes by ``HERMES_SUPERVISOR`` / ``HERMES_JOB_ID`` in
that view, so the zygote is started with a large padding variable
(:data:`ROOM_ENV`) and each child writes its own environment into that area
(:func:`publish_environ`).  The zygote itself has no ``HERMES_SUPERVISOR``: it
is no job's process, and it dies with the daemon (``PDEATHSIG``).  ``SPT_NOENV=1`` keeps setproctitle from using the
area for the title (the title fits in the zygote's long command line).  A warm
child's environment also has ``HERMES_ZYGOTE=<zygote pid>``.

Wire format between daemon and zygote (a private ``SOCK_SEQPACKET`` socketpair):
one msgpack map per packet.  The zygote first sends ``{"ready": true, "pid",
"seconds"}``, then ``{"spare": pid}`` with the write end of that spare's request
pipe as ``SCM_RIGHTS`` for each spare it forks, or ``{"errno", "error"}`` when a
fork failed; the daemon asks for more with ``{"fork": n, "held": n}``.  The
daemon writes a job (``{"cwd", "env", "log_path", "entry", "zygote"}``,
length-prefixed msgpack) straight to a spare's pipe (:mod:`hermesd.warmstart`).
The daemon never waits for the zygote to warm up: until it is ready (or after
it died, once the spares it still holds are used), children start cold.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import msgpack

from hermesd.prctl import set_death_signal

ENTRY = "child.__main__:main"
"""What a forked child runs (``module:function`` returning an exit status)."""
PREPARE = "child.__main__:prepare"
"""What a spare runs while it waits for a job (connects to the daemon ahead of time)."""

PRELOAD = ("zmq", "msgpack", "psutil", "setproctitle", "child.__main__", "child.channel", "child.agent",
           "child.messages", "child.trajectory", "child.tools.registry", "child.tools.terminal", "child.tools.files",
           "child.tools.web", "child.tools.delegation", "child.tools.kanban", "child.providers.select",
           "child.providers.scripted", "child.providers.anthropic", "child.providers.openai_compat",
           "anthropic", "anthropic.types", "anthropic.resources.messages", "openai", "ssl")
"""Modules the zygote imports before it says ready (missing ones are skipped)."""

MARK_ENV = "HERMES_ZYGOTE"
ROOM_ENV = "HERMES_ENV_ROOM"
ENV_ROOM_BYTES = 64 * 1024
"""Room for a child's environment in ``/proc/PID/environ`` (one variable may hold 128 KiB)."""
READY_LINE = "warm and ready"
"""Printed by the zygote on the daemon's stderr once it is warm."""
READY_TIMEOUT = 120.0
REPLY_TIMEOUT = 15.0
"""Seconds the daemon waits for a spare it asked for before it starts the child cold."""
MAX_PACKET = 64 * 1024
SPARES = 2
"""Children forked ahead of time, so that a request costs no fork."""
REPLENISH_DELAY = 0.05
"""Seconds from the daemon's request until a used spare is replaced, while it holds
another: the fork then does not compete for the CPU with the child just handed out
(measured on 2 cores: at once, request -> hello 4 ms became 7 ms)."""
RESTART_AFTER = 10.0
"""Seconds between two starts of a zygote that keeps dying."""

_HEADER = struct.Struct("!I")


# wire ---------------------------------------------------------------------

def send_msg(sock: socket.socket, obj: Any, fds: tuple[int, ...] = ()) -> None:
    """Send one msgpack message as one packet, with ``fds`` as ``SCM_RIGHTS``."""
    data = msgpack.packb(obj, use_bin_type=True)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv_msg(sock: socket.socket) -> tuple[Any, list[int]] | None:
    """Receive one packet: ``(message, fds)``; ``None`` at end of stream.

    Raises ``ValueError`` for a packet or descriptor list that was cut short,
    ``OSError`` (``BlockingIOError`` once ``SO_RCVTIMEO`` has run out).
    """
    data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET, 4)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or not data:
        for fd in fds:
            os.close(fd)
        if data:
            raise ValueError("a zygote message was cut short")
        return None
    return msgpack.unpackb(data, raw=False), fds


def hand_over(cmd: int, request: dict[str, Any]) -> bool:
    """Write ``request`` (length-prefixed msgpack) to a spare's pipe ``cmd`` and close it.

    False when the spare is gone (its end of the pipe is closed).
    """
    try:
        data = msgpack.packb(request, use_bin_type=True)
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(cmd, view):]
        return True
    except OSError:  # BrokenPipeError: a dead spare
        return False
    finally:
        os.close(cmd)


# the zygote's side --------------------------------------------------------

def _arm_lifeline(sig: int) -> None:
    """Die with the daemon: ``sig`` on the parent's death, and a parent check (the zygote
    and its spares are both children of the daemon)."""
    set_death_signal(sig)
    expected = os.environ.get("HERMES_DAEMON_PID")
    if expected and os.getppid() != int(expected):
        os._exit(0)


def _title(text: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(text)
    except ImportError:  # pragma: no cover - a declared dependency
        pass


def warm_up(preload: tuple[str, ...]) -> list[str]:
    """Import ``preload``; returns the names that failed (optional SDKs may be absent)."""
    failed = []
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module; the child imports it itself if needed
            failed.append(name)
    import gc

    gc.collect()
    gc.freeze()  # keep the collector's writes off the shared pages
    return failed


def serve(fd: int, preload: tuple[str, ...]) -> int:
    """The zygote's loop: warm up, fork spares, say ready, send each spare to the daemon,
    and fork one more per ``{"fork": n}`` the daemon sends (:data:`REPLENISH_DELAY` after
    the first one owed while the daemon still ``held`` spares, at once otherwise)."""
    started = time.monotonic()
    _arm_lifeline(signal.SIGKILL)
    _title("hermes-zygote (warming up)")
    sock = socket.socket(fileno=fd)
    failed = warm_up(preload)
    _title("hermes-zygote")
    first = []
    for _ in range(SPARES):
        with contextlib.suppress(OSError):  # no spare now: the daemon asks again
            first.append(Spare.fork(sock))
    seconds = time.monotonic() - started
    send_msg(sock, {"ready": True, "pid": os.getpid(), "seconds": seconds, "failed": failed})
    print(f"hermes-zygote[{os.getpid()}]: {READY_LINE} in {seconds:.2f}s (not imported: {', '.join(failed) or 'none'})",
          file=sys.stderr, flush=True)
    for spare in first:
        spare.send(sock)
    wanted, due = SPARES - len(first), 0.0
    while True:
        if wanted and not select.select([sock], [], [], max(0.0, due - time.monotonic()))[0]:
            wanted -= 1
            try:
                spare = Spare.fork(sock)
            except OSError as exc:
                send_msg(sock, {"errno": exc.errno or 0, "error": f"fork failed: {exc}"})
                continue
            spare.send(sock)
            continue
        got = recv_msg(sock)
        if got is None:
            return 0
        msg, fds = got
        for extra in fds:
            os.close(extra)
        if isinstance(msg, dict):
            more = int(msg.get("fork") or 0)
            if not msg.get("held"):  # the daemon holds none: fork at once
                due = time.monotonic()
            elif more and not wanted:  # the first spare owed sets the time
                due = time.monotonic() + REPLENISH_DELAY
            wanted += more


@dataclass
class Spare:
    """A child forked ahead of time, waiting for its job: ``cmd`` (write end of its
    request pipe) and ``pid``."""

    cmd: int
    pid: int

    @classmethod
    def fork(cls, sock: socket.socket) -> Spare:
        """Double-fork a spare; it is re-parented to the daemon and waits on its pipe.

        The intermediate reports the spare's pid on a pipe before it exits.
        Raises ``OSError`` when a fork failed.
        """
        cmd_r, cmd_w = os.pipe()
        pid_r, pid_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        middle = os.fork()
        if middle == 0:  # the intermediate: fork the spare, then leave it to the subreaper
            code, me = 0, os.getpid()
            try:
                spare = os.fork()
                if spare == 0:
                    _spare_main(cmd_r, sock, me)
                os.write(pid_w, str(spare).encode())
            except BaseException:  # noqa: BLE001 - no spare: the zygote reads no pid
                code = 1
            os._exit(code)
        os.close(cmd_r)
        os.close(pid_w)
        try:
            os.waitpid(middle, 0)
            pid = os.read(pid_r, 32)
        finally:
            os.close(pid_r)
        if not pid:
            os.close(cmd_w)
            raise OSError(0, "the intermediate process could not fork a spare")
        return cls(cmd_w, int(pid))

    def send(self, sock: socket.socket) -> None:
        """Send ``{"spare": pid}`` and the pipe's write end to the daemon; ours is closed."""
        try:
            send_msg(sock, {"spare": self.pid}, (self.cmd,))
        finally:
            os.close(self.cmd)


def _read_request(fd: int) -> dict[str, Any] | None:
    """The spare's request from its pipe (None at end of stream: the zygote is gone)."""
    data = b""
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack(data[:_HEADER.size])[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
    return msgpack.unpackb(data[_HEADER.size:], raw=False)


def _spare_main(cmd_fd: int, sock: socket.socket, middle: int) -> None:
    """In a spare: leave the zygote's session, belong to the daemon, wait for a job, become its child."""
    code = 1
    try:
        os.setsid()
        os.close(sock.detach())
        _close_all_but(cmd_fd)
        _await_new_parent(middle)
        _arm_lifeline(signal.SIGKILL)  # until the child's own lifeline takes over
        _title("hermes-zygote (spare)")
        _fresh_process()  # before the request: it costs the job nothing
        _prepare()
        area = _blank_environment()
        request = _read_request(cmd_fd)
        if request is None:
            os._exit(0)
        os.close(cmd_fd)
        try:
            _redirect(request["cwd"], request["log_path"])
        except OSError as exc:
            print(f"hermes-child: could not start: {exc}", file=sys.stderr, flush=True)
            os._exit(127)
        entry = request.get("entry") or ENTRY
        _fresh_environment(request["env"], entry, request["zygote"], area)
        module, _, func = entry.partition(":")
        code = getattr(importlib.import_module(module), func)()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the log keeps it; the exit status tells the daemon
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code if isinstance(code, int) else 1)


def _prepare() -> None:
    """Run :data:`PREPARE` in a spare; a failure is printed (on the zygote's stderr) and ignored."""
    module, _, func = PREPARE.partition(":")
    try:
        getattr(importlib.import_module(module), func)()
    except Exception as exc:  # noqa: BLE001 - the child then does it itself, a little later
        print(f"hermes-zygote spare[{os.getpid()}]: {PREPARE} failed: {exc!r}", file=sys.stderr, flush=True)


def _close_all_but(*keep: int) -> None:
    """Close every descriptor above 2 except ``keep`` (as ``close_fds`` would)."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _max_fd())


def _redirect(cwd: str, log_path: str) -> None:
    """stdin from ``/dev/null``, stdout and stderr to the log, then into ``cwd`` (so
    that a missing directory is reported on the job's log)."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null_fd)
    os.close(log_fd)
    os.chdir(cwd)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 65536


def _blank_environment() -> tuple[int, int] | None:
    """In a spare, before its job: drop the zygote's environment (``os.environ`` and
    ``putenv``) and zero the area ``/proc/PID/environ`` shows, so that the job only
    writes its own variables there, into pages already copied.  Returns the area
    (see :func:`environ_area`)."""
    os.environ.clear()  # libc's environ then points into that area no more
    area = environ_area()
    if area is not None:
        ctypes.memset(area[0], 0, area[1] - area[0])
    return area


def _fresh_environment(env: dict[str, str], entry: str, zygote: int, area: tuple[int, int] | None) -> None:
    """The job's environment, also in ``/proc/PID/environ`` (``area``, blanked), its
    ``sys.path`` and ``sys.argv``."""
    os.environ.update(env)
    os.environ[MARK_ENV] = str(zygote)
    publish_environ(dict(os.environ), area)
    for path in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if path and path not in sys.path:
            sys.path.insert(0, path)  # as a new interpreter would
    sys.argv = [sys.executable, "-m", entry.partition(":")[0]]


def _fresh_process() -> None:
    """Redo what a child must not share with the zygote: signal dispositions, RNG state,
    event loop and zmq context (see the module doc)."""
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import random

    random.seed(os.urandom(32))
    if "ssl" in sys.modules:
        sys.modules["ssl"].RAND_add(os.urandom(32), 32.0)
    if "asyncio" in sys.modules:
        sys.modules["asyncio"].set_event_loop_policy(None)
    if "zmq" in sys.modules:
        sys.modules["zmq"].Context._instance = None


def environ_area() -> tuple[int, int] | None:
    """``(start, end)``: the addresses of the memory the kernel shows as
    ``/proc/self/environ`` (``env_start``/``env_end``, fields 50 and 51 of
    ``/proc/self/stat``, proc(5)); ``None`` where unknown (not Linux)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None


def publish_environ(env: dict[str, str], area: tuple[int, int] | None) -> bool:
    """Make ``/proc/self/environ`` show ``env``: write it into ``area``, which
    :func:`_blank_environment` zeroed.

    Only safe once nothing points into the area any more (``os.environ`` was
    cleared first).  False, changing nothing, when ``env`` does not fit or the
    area is unknown.
    """
    if area is None:
        return False
    start, end = area
    block = b"".join(f"{k}={v}".encode(errors="surrogateescape") + b"\0" for k, v in env.items())
    if len(block) >= end - start:  # the last byte stays NUL: the end of the block
        print(f"hermes-zygote: the environment ({len(block)} bytes) does not fit in /proc/{os.getpid()}/environ",
              file=sys.stderr, flush=True)
        return False
    ctypes.memmove(start, block, len(block))
    return True


def _await_new_parent(middle: int, timeout: float = 5.0) -> None:
    """Wait until the intermediate has exited and we belong to the subreaper (the daemon)."""
    deadline = time.monotonic() + timeout
    while os.getppid() == middle and time.monotonic() < deadline:
        time.sleep(0.0002)


def main(argv: list[str] | None = None) -> int:
    """``python -m hermesd.zygote FD [MODULE,MODULE…]`` — run by hermesd only."""
    argv = sys.argv[1:] if argv is None else argv
    preload = tuple(filter(None, argv[1].split(","))) if len(argv) > 1 else PRELOAD
    return serve(int(argv[0]), preload)


if __name__ == "__main__":
    sys.exit(main())
