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
used spare is replaced after :data:`REPLENISH_DELAY` without requests (at once
when none is left), so that the fork does not compete with the child just
started.  A spare whose zygote goes away reads end of file and exits.

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

Wire format between daemon and zygote (a private ``socketpair``): 4-byte
big-endian length, then a msgpack map.  The zygote first sends
``{"ready": true, "pid", "seconds"}``; then each request
``{"cwd", "env", "log_path", "entry"}`` is answered ``{"pid"}`` or
``{"errno", "error"}``.  The daemon never waits for the zygote to warm up: until
it is ready (or after it died), children start cold.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import msgpack

from hermesd.prctl import is_subreaper, set_death_signal

log = logging.getLogger("hermesd")

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
SPARES = 2
"""Children forked ahead of time, so that a request costs no fork."""
REPLENISH_DELAY = 0.02
"""Seconds without a request before a used spare is replaced, while another is left:
the fork then does not compete for the CPU with the child just handed out."""
RESTART_AFTER = 10.0
"""Seconds between two starts of a zygote that keeps dying."""

_HEADER = struct.Struct("!I")


# framing ------------------------------------------------------------------

def send_msg(sock: socket.socket, obj: Any) -> None:
    """Send one length-prefixed msgpack message."""
    data = msgpack.packb(obj, use_bin_type=True)
    sock.sendall(_HEADER.pack(len(data)) + data)


def recv_msg(sock: socket.socket) -> Any:
    """Receive one message; ``None`` at end of stream."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(head)[0])
    return None if body is None else msgpack.unpackb(body, raw=False)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# the daemon's side --------------------------------------------------------

@dataclass
class ForkedChild:
    """Handle of a warm child: its ``pid`` (``returncode`` is set by the reaper)."""

    pid: int
    returncode: int | None = None


class ZygoteClient:
    """The daemon's handle on its zygote.

    ``env``: the zygote's environment (see the module doc); ``preload``:
    modules it imports.  Nothing here blocks on the zygote warming up.
    """

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = PRELOAD):
        # SPT_NOENV: setproctitle must leave the environment area alone (see the module doc)
        self.env = {**env, "SPT_NOENV": "1", ROOM_ENV: "." * ENV_ROOM_BYTES}
        self.preload = preload
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.info: dict[str, Any] | None = None
        self._started = 0.0

    def start(self) -> None:
        """Start the zygote process (returns at once; it warms up on its own)."""
        self.close()
        ours, theirs = socket.socketpair()
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
        # poll() and then reads, and the poll wake-up came 2-3 ms after the reply (measured:
        # 0.6 ms against 2.5-3 ms per spawn; the zygote forks its next spare right after
        # replying).  A read that times out raises BlockingIOError, an OSError.
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(REPLY_TIMEOUT), 0))
        self.sock, self.info = ours, None

    def ready(self) -> bool:
        """True once the zygote has said ready and is still there (never blocks)."""
        if self.sock is None:
            self._restart()
            return False
        try:
            readable = select.select([self.sock], [], [], 0)[0]
            if readable:  # the ready message, or end of stream (the zygote died)
                msg = recv_msg(self.sock)
                if not isinstance(msg, dict) or not msg.get("ready") or self.info is not None:
                    raise ConnectionError("zygote went away")
                self.info = msg
                log.info("warm start ready: zygote pid %s, warmed up in %.2fs", msg.get("pid"), msg.get("seconds"))
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            self._lost(exc)
            return False
        if self.info is None and time.monotonic() - self._started > READY_TIMEOUT:
            log.warning("warm start: zygote not ready after %.0fs; giving up on it", READY_TIMEOUT)
            self.close()
        return self.info is not None

    def _restart(self) -> None:
        """Start a new zygote, unless the last one started less than :data:`RESTART_AFTER` ago."""
        if time.monotonic() - self._started >= RESTART_AFTER:
            self.start()

    def _lost(self, why: object) -> None:
        """The zygote died or broke: replace it (at once if it had been warm, else not in a loop)."""
        log.warning("warm start: zygote lost (%s); children start cold until it is back", why)
        was_ready = self.info is not None
        self.close()
        if was_ready:
            self.start()
        else:
            self._restart()

    def spawn(self, *, cwd: str, env: dict[str, str], log_path: str, entry: str = ENTRY) -> ForkedChild | None:
        """Fork a child from the zygote; ``None`` when it is not ready (start the child cold).

        Raises ``OSError`` when the zygote could not fork or failed in the
        middle of the request (it is restarted later; the job fails rather than
        risk two processes for it).  The child sets itself up after the reply:
        the caller checks ``cwd`` and the log first (:class:`hermesd.procs.ForkServerOS`).
        """
        if not is_subreaper() or not self.ready():
            return None
        try:
            send_msg(self.sock, {"cwd": cwd, "env": env, "log_path": log_path, "entry": entry})
        except OSError as exc:
            self._lost(exc)
            return None  # nothing was forked
        try:
            reply = recv_msg(self.sock)  # blocking, up to REPLY_TIMEOUT (SO_RCVTIMEO, set in start)
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            reply = {"errno": 0, "error": f"no answer from the zygote: {exc}"}
        if not isinstance(reply, dict) or not (reply.get("pid") or reply.get("error")):
            reply = {"errno": 0, "error": "the zygote went away during the request"}
        if reply.get("pid"):
            return ForkedChild(int(reply["pid"]))
        if reply.get("errno") == 0:
            self._lost(reply["error"])
        raise OSError(int(reply.get("errno") or 0), f"warm start: {reply['error']}")

    def close(self) -> None:
        """Stop the zygote (its end of the socket closes; SIGKILL to be sure)."""
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
    """The zygote's loop: warm up, keep spares, say ready, hand a child out per request."""
    started = time.monotonic()
    _arm_lifeline(signal.SIGKILL)
    _title("hermes-zygote (warming up)")
    sock = socket.socket(fileno=fd)
    failed = warm_up(preload)
    _title("hermes-zygote")
    spares: list[Spare] = []
    _replenish(spares, sock)
    seconds = time.monotonic() - started
    send_msg(sock, {"ready": True, "pid": os.getpid(), "seconds": seconds, "failed": failed})
    print(f"hermes-zygote[{os.getpid()}]: {READY_LINE} in {seconds:.2f}s (not imported: {', '.join(failed) or 'none'})",
          file=sys.stderr, flush=True)
    while True:
        if len(spares) < SPARES and (not spares or not select.select([sock], [], [], REPLENISH_DELAY)[0]):
            _replenish(spares, sock)
        request = recv_msg(sock)
        if request is None:
            return 0
        request = {**request, "zygote": os.getpid()}
        reply = {"errno": 0, "error": "no child could be forked"}
        try:
            for spare in _candidates(spares, sock):
                answer = spare.assign(request)
                if answer is not None:  # None: a spare that died meanwhile
                    reply = answer
                    break
        except OSError as exc:
            reply = {"errno": exc.errno or 0, "error": f"fork failed: {exc}"}
        send_msg(sock, reply)


def _candidates(spares: list[Spare], sock: socket.socket):
    """The spares, then two fresh children."""
    while spares:
        yield spares.pop(0)
    for _ in range(2):
        yield Spare.fork(sock)


def _replenish(spares: list[Spare], sock: socket.socket) -> None:
    """Fork spares up to :data:`SPARES`, unless a request is waiting (it goes first)."""
    while len(spares) < SPARES and not select.select([sock], [], [], 0)[0]:
        try:
            spares.append(Spare.fork(sock))
        except OSError:
            return  # no spare now: the next request forks its own


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

    def assign(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Hand ``request`` over; ``{"pid"}``, or None when the spare is dead.

        The zygote does not wait for the spare to set itself up (the daemon has
        checked the directory and the log beforehand): the reply goes out while
        the spare wakes.  A spare that then fails prints why on the job's log
        (or the zygote's stderr) and exits 127, as an ``exec`` that failed would.
        """
        try:
            data = msgpack.packb(request, use_bin_type=True)
            os.write(self.cmd, _HEADER.pack(len(data)))
            view = memoryview(data)
            while view:
                view = view[os.write(self.cmd, view):]
        except BrokenPipeError:
            return None
        finally:
            os.close(self.cmd)
        return {"pid": self.pid}


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
        _fresh_environment(request["env"], entry, request["zygote"])
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


def _fresh_environment(env: dict[str, str], entry: str, zygote: int) -> None:
    """The job's environment, also in ``/proc/PID/environ``, its ``sys.path`` and ``sys.argv``."""
    os.environ.clear()
    os.environ.update(env)
    os.environ[MARK_ENV] = str(zygote)
    publish_environ(dict(os.environ))
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


def publish_environ(env: dict[str, str]) -> bool:
    """Make ``/proc/self/environ`` show ``env``: overwrite the area the kernel reads it from.

    Only safe after ``os.environ`` was replaced (libc then points to new
    strings, nothing to the old area).  False, changing nothing, when ``env``
    does not fit or the area is unknown (not Linux).
    """
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51
    except (OSError, IndexError, ValueError):
        return False
    block = b"".join(f"{k}={v}".encode(errors="surrogateescape") + b"\0" for k, v in env.items())
    if not start or len(block) >= end - start:
        print(f"hermes-zygote: the environment ({len(block)} bytes) does not fit in /proc/{os.getpid()}/environ",
              file=sys.stderr, flush=True)
        return False
    ctypes.memmove(start, block + b"\0" * (end - start - len(block)), end - start)
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
