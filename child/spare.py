"""A spare: a child forked ahead of time by the zygote (:mod:`child.zygote`), waiting for its job.

Who is whose parent — the design in one paragraph.  A child forked directly
by the zygote would have the zygote as its parent: its ``PR_SET_PDEATHSIG``
would fire when the *zygote* dies rather than the daemon, and the daemon could
not ``waitpid`` it.  So the zygote forks the spare as its own *sibling*:
``clone(2)`` with ``CLONE_PARENT`` (:func:`fork_beside`) makes the daemon the
spare's parent from its first instruction.  Where that call is refused (a
seccomp filter, another architecture), the zygote double-forks instead: it
forks an intermediate process, which forks the spare and exits at once; the
orphaned spare is re-parented by the kernel to the nearest child subreaper
above it — hermesd, which is one (``PR_SET_CHILD_SUBREAPER``) — and only
*then* arms its lifeline against the daemon's pid (arming before would fire
when the intermediate exits).  The double fork costs a second copy of the
zygote's page tables and their teardown when the intermediate exits: on 2
cores about as much CPU as the job of a short batch item.  From there on a warm child is indistinguishable from a cold one for
the daemon: its parent is hermesd, hermesd reaps it through ``SIGCHLD`` and
learns its exit status, ``killpg(pid)`` reaches its process group, and
``PDEATHSIG`` fires when hermesd dies.  When the daemon is not a subreaper
(not Linux) the warm path is not used.

Each spare leaves the zygote's session, belongs to the daemon, arms
``PDEATHSIG`` (SIGKILL), redoes its process state, connects to the daemon's
``children.sock`` (:data:`PREPARE`) and waits on a pipe for its job
(:func:`hermesd.warm.wire.read_request`).  What a forked child must not share
with the zygote, and where it is redone:

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

A warm child's environment also has ``HERMES_ZYGOTE=<zygote pid>``
(:data:`hermesd.warm.wire.MARK_ENV`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass

from hermesd.system import rlimits
from hermesd.system.prctl import set_death_signal
from hermesd.warm.wire import MARK_ENV, read_request, send_msg

_CLONE_PARENT = 0x00008000
"""``clone(2)`` flag: the new process's parent is the caller's parent (``<linux/sched.h>``)."""
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
"""The ``clone`` system call's number here (``asm/unistd_64.h``, ``asm-generic/unistd.h``)."""
_beside_refused = False  # fork_beside() was refused once: the zygote double-forks from then on

ENTRY = "child.__main__:main"
"""What a spare runs once it has its job (``module:function`` returning an exit status)."""
PREPARE = "child.__main__:prepare"
"""What a spare runs while it waits for a job (connects to the daemon ahead of time)."""


def fork_beside() -> int:
    """``os.fork()`` whose child is the caller's sibling: ``clone(CLONE_PARENT | SIGCHLD)``.

    Returns 0 in the child and the child's pid in the caller, like ``os.fork``,
    and does what ``os.fork`` does around it (``PyOS_BeforeFork``, then
    ``PyOS_AfterFork_Child`` or ``_Parent``: locks, threads, ``os.register_at_fork``
    callbacks such as ``random``'s reseed), with the GIL held throughout
    (``ctypes.PyDLL``).  What glibc's ``fork()`` adds and a raw ``clone`` skips —
    its ``pthread_atfork`` handlers, the child's cached thread id, its robust-mutex
    list — matters only to a process with other threads; the zygote has none.
    The child's exit is signalled to the parent with the caller's own exit signal
    (``SIGCHLD``, from ``subprocess``).  Raises ``OSError`` (``ENOSYS`` on an
    architecture whose call number is not known here; ``EINVAL``/``EPERM`` where
    the kernel or a seccomp filter refuses it).
    """
    if _SYS_CLONE is None:
        raise OSError(errno.ENOSYS, f"clone(CLONE_PARENT) is not wired for {os.uname().machine}")
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = libc.syscall(ctypes.c_long(_SYS_CLONE), ctypes.c_ulong(_CLONE_PARENT | signal.SIGCHLD),
                       ctypes.c_ulong(0), ctypes.c_void_p(None), ctypes.c_void_p(None), ctypes.c_ulong(0))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    failed = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(failed, f"clone(CLONE_PARENT): {os.strerror(failed)}")
    return pid


def arm_lifeline(sig: int) -> None:
    """Die with the daemon: ``sig`` on the parent's death, and a parent check (the zygote
    and its spares are both children of the daemon)."""
    set_death_signal(sig)
    expected = os.environ.get("HERMES_DAEMON_PID")
    if expected and os.getppid() != int(expected):
        os._exit(0)


def title(text: str) -> None:
    """Set the process title (``ps`` shows it)."""
    try:
        import setproctitle

        setproctitle.setproctitle(text)
    except ImportError:  # pragma: no cover - a declared dependency
        pass


@dataclass
class Spare:
    """A child forked ahead of time, waiting for its job: ``cmd`` (write end of its
    request pipe) and ``pid``."""

    cmd: int
    pid: int

    @classmethod
    def fork(cls, sock: socket.socket) -> Spare:
        """Fork a spare as the zygote's sibling (a child of the daemon) that waits on its
        pipe; where :func:`fork_beside` is refused, double-fork it (:meth:`_double_fork`).
        Raises ``OSError`` when a fork failed.
        """
        global _beside_refused
        if not _beside_refused:
            cmd_r, cmd_w = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = fork_beside()
            except OSError as exc:
                os.close(cmd_r)
                os.close(cmd_w)
                if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
                    raise
                _beside_refused = True
            else:
                if pid == 0:
                    _spare_main(cmd_r, sock, None)
                os.close(cmd_r)
                return cls(cmd_w, pid)
        return cls._double_fork(sock)

    @classmethod
    def _double_fork(cls, sock: socket.socket) -> Spare:
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


def _spare_main(cmd_fd: int, sock: socket.socket, middle: int | None) -> None:
    """In a spare: leave the zygote's session, belong to the daemon (at once, or once the
    intermediate ``middle`` exited), wait for a job, become its child."""
    code = 1
    try:
        os.setsid()
        os.close(sock.detach())
        _close_all_but(cmd_fd)
        if middle is not None:
            _await_new_parent(middle)
        arm_lifeline(signal.SIGKILL)  # until the child's own lifeline takes over
        title("hermes-zygote (spare)")
        _fresh_process()  # before the request: it costs the job nothing
        _prepare()
        area = blank_environment()
        request = read_request(cmd_fd)
        if request is None:
            os._exit(0)
        os.close(cmd_fd)
        try:
            _redirect(request["cwd"], request["log_path"])
            rlimits.apply_env(request["env"])  # the job's rlimits, before its first instruction
        except (OSError, ValueError, KeyError) as exc:
            print(f"hermes-child: could not start: {exc}", file=sys.stderr, flush=True)
            os._exit(127)
        _fresh_environment(request["env"], ENTRY, request["zygote"], area)
        module, _, func = ENTRY.partition(":")
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
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
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


def blank_environment() -> tuple[int, int] | None:
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
    :func:`blank_environment` zeroed.

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


