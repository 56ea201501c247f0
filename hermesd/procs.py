"""Starting, stopping and reaping child processes.

Each child runs ``python -m child`` in a new session (``setsid``: its own
process group, no controlling terminal), in the job's working directory, with
stdout and stderr appended to ``jobs/ID/log`` (a file, never a pipe the
daemon must drain) and an environment scrubbed of systemd's variables.

Graceful stop (supervisord/systemd ``KillMode=mixed`` style):

1. ``SIGINT`` to the child itself: it finishes or abandons its step and
   reports ``interrupted`` with its partial output;
2. after ``interrupt_grace_seconds``: ``SIGTERM`` to its whole process group;
3. after another grace period: ``SIGKILL`` to the process group.

A signal that finds the process gone (``ESRCH``) is the normal end of a race,
not an error.  When the child exits, its process group is killed (commands its
tools started) and descendants that escaped the group by double-forking are
found by the ``HERMES_JOB_ID`` in their environment and killed too.  hermesd is
a child subreaper (``PR_SET_CHILD_SUBREAPER``), so those orphans are re-parented
to it and reaped here: no zombies.

Every OS call goes through :class:`OS`, the one seam tests replace to drive
both sides of every race deterministically.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

SCRUBBED_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
SUPERVISOR_ENV = "HERMES_SUPERVISOR"
CHILD_ARGV = (sys.executable, "-m", "child")


class OS:
    """The real operating system: spawn, signal, wait, clock."""

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """Start ``argv`` in a new session; returns a handle with ``.pid``.

        Raises ``OSError`` when the program or ``cwd`` cannot be used.
        """
        with open(log_path, "ab", buffering=0) as log:
            return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)

    def warm(self) -> None:
        """Prepare fast starts (nothing to do for cold starts)."""

    def describe(self) -> dict[str, Any]:
        """How children start, for ``status``: ``{"method": "spawn"}``."""
        return {"method": "spawn"}

    def kill(self, pid: int, sig: int) -> bool:
        """Send ``sig`` to ``pid``; False when it is already gone."""
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def killpg(self, pgid: int, sig: int) -> bool:
        """Send ``sig`` to process group ``pgid``; False when it is empty."""
        try:
            os.killpg(pgid, sig)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:  # a zombie-only group on some kernels
            return False

    def reap(self) -> list[tuple[int, int]]:
        """Reap every exited child: ``[(pid, returncode)]`` (negative = killed by signal)."""
        out = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return out
            if pid == 0:
                return out
            out.append((pid, os.waitstatus_to_exitcode(status)))

    def descendants_with_env(self, key: str, value: str, skip: frozenset[int] = frozenset()) -> list[int]:
        """Pids of our descendants whose environment has ``key=value``.

        The subtrees of the direct children in ``skip`` are not searched.  As a
        child subreaper we adopt every orphan, so a process that escaped an
        exited child's process group hangs under one of our direct children
        (or is one): the search costs an environment read per process of the
        subtrees searched, not per process we supervise.
        """
        found = []
        todo = [pid for pid in children_of("self") if pid not in skip]
        while todo:
            pid = todo.pop()
            todo.extend(children_of(str(pid)))
            try:
                if psutil.Process(pid).environ().get(key) == value:
                    found.append(pid)
            except psutil.Error:
                continue
        return found

    def start_time(self, pid: int) -> float | None:
        """The process's start time (seconds since the epoch), or None when gone."""
        try:
            return psutil.Process(pid).create_time()
        except psutil.Error:
            return None


class ForkServerOS(OS):
    """``supervisor.start_method: forkserver``: children forked from a warm template.

    The template is :mod:`hermesd.zygote` (it has already imported the child
    runtime and the provider SDKs); its children are re-parented to hermesd,
    so reaping, signals and the lifeline work exactly as for a cold child.
    Until the zygote is warm, after it died, for any other program than the
    child runtime, or where hermesd is not a subreaper, :meth:`spawn` starts
    the child cold (``OS.spawn``).  The zygote's environment names the
    daemon's ``supervisor_id`` as ``HERMES_ZYGOTE_OF``, not ``HERMES_SUPERVISOR``:
    it is not a job's process (it dies with the daemon by ``PDEATHSIG``).
    """

    def __init__(self, supervisor_id: str, children_socket: Path | None = None):
        from hermesd.warmstart import ZygoteClient

        extra = {"HERMES_ZYGOTE_OF": supervisor_id, "HERMES_DAEMON_PID": str(os.getpid())}
        if children_socket is not None:  # spares connect to it before they have a job
            extra["HERMES_CHILD_SOCKET"] = str(children_socket)
        self.zygote = ZygoteClient(child_env(os.environ, extra))

    def warm(self) -> None:
        """Start the zygote (it warms up in the background)."""
        self.zygote.start()

    def describe(self) -> dict[str, Any]:
        """``{"method": "forkserver", "zygote": pid or None (not ready), "spares": n held}``."""
        return {"method": "forkserver", **self.zygote.describe()}

    def reap(self) -> list[tuple[int, int]]:
        """:meth:`OS.reap`; a zygote among the reaped is replaced at once (its spares are kept)."""
        exits = super().reap()
        self.zygote.reaped(exits)
        return exits

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """Fork ``argv`` (the child runtime) from the zygote, or start it cold; see the class doc."""
        if tuple(argv[:3]) == CHILD_ARGV:  # the title words after it need no room: the zygote has it
            # what a cold start would refuse, refused here too: the zygote does not wait for the child
            os.close(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666))
            if not os.path.isdir(cwd):
                raise FileNotFoundError(errno.ENOENT, "No such directory", cwd)
            handle = self.zygote.spawn(cwd=cwd, env=env, log_path=str(log_path))
            if handle is not None:
                return handle
        return super().spawn(argv, cwd=cwd, env=env, log_path=log_path)


def make_os(start_method: str, supervisor_id: str = "", children_socket: Path | None = None) -> OS:
    """The OS seam for ``supervisor.start_method``: ``spawn`` (a new interpreter per
    child, the default) or ``forkserver`` (:class:`ForkServerOS`; ``children_socket``
    is the daemon's ``children.sock``, which its spares connect to ahead of time)."""
    return ForkServerOS(supervisor_id, children_socket) if start_method == "forkserver" else OS()


def child_env(base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """The environment of a child: ``base`` minus systemd's variables, plus ``extra``."""
    env = {k: v for k, v in {**base, **extra}.items() if k not in SCRUBBED_ENV}
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@dataclass
class Child:
    """One live child process: ``job`` id, ``pid`` (= its process group id), its handle."""

    job: str
    pid: int
    handle: Any
    stop_reason: str | None = None
    timers: list[Any] = field(default_factory=list)
    returncode: int | None = None


ExitCallback = Callable[[Child], None]


class ProcessManager:
    """The live children of this daemon.

    ``loop`` schedules the escalation timers (``call_later``); ``on_exit`` is
    called once per child after it is reaped and its group cleaned up.
    ``grace`` is the pause in seconds between the steps of a graceful stop.
    """

    def __init__(self, loop: Any, on_exit: ExitCallback, *, os_seam: OS | None = None,
                 grace: float = 3.0, supervisor_id: str = ""):
        self.loop = loop
        self.on_exit = on_exit
        self.os = os_seam or OS()
        self.grace = grace
        self.supervisor_id = supervisor_id
        self.children: dict[str, Child] = {}
        self._by_pid: dict[int, Child] = {}

    def start(self, job: str, *, cwd: str, log_path: Path, env: dict[str, str],
              argv: list[str] | None = None, title: list[str] = ()) -> Child:
        """Spawn the child of ``job``.  Raises ``OSError`` when it cannot start.

        ``title`` words follow ``python -m child`` in argv: they show in ``ps``
        from the first instant and reserve the room setproctitle then rewrites
        (``SPT_NOENV=1`` keeps it from clobbering the environment, which must
        stay readable in ``/proc/PID/environ`` for the leftover sweep).
        """
        argv = argv or [sys.executable, "-m", "child", job, *title]
        extra = {"HERMES_JOB_ID": job, SUPERVISOR_ENV: self.supervisor_id, "HERMES_DAEMON_PID": str(os.getpid()),
                 "SPT_NOENV": "1"}
        handle = self.os.spawn(argv, cwd=cwd, env=child_env(os.environ, {**env, **extra}), log_path=log_path)
        child = Child(job, handle.pid, handle)
        self.children[job] = child
        self._by_pid[child.pid] = child
        return child

    def stop(self, job: str, reason: str) -> bool:
        """Begin the graceful stop of ``job``'s child; False when it has none.

        ``reason`` is remembered (``cancel``, ``shutdown``, ``timeout``, …) for
        the final state.  Calling again only keeps the first reason.
        """
        child = self.children.get(job)
        if child is None:
            return False
        if child.stop_reason is not None:
            return True
        child.stop_reason = reason
        self.os.kill(child.pid, signal.SIGINT)
        child.timers.append(self.loop.call_later(self.grace, self._escalate, child, signal.SIGTERM))
        child.timers.append(self.loop.call_later(2 * self.grace + 0.5, self._escalate, child, signal.SIGKILL))
        return True

    def kill_now(self, job: str, reason: str) -> None:
        """SIGKILL the child's process group at once (no grace)."""
        child = self.children.get(job)
        if child is not None:
            child.stop_reason = child.stop_reason or reason
            self._escalate(child, signal.SIGKILL)

    def _escalate(self, child: Child, sig: int) -> None:
        if child.returncode is None:
            self.os.killpg(child.pid, sig)

    def reap(self) -> None:
        """Reap every exited process; finish the bookkeeping of our children."""
        for pid, code in self.os.reap():
            child = self._by_pid.pop(pid, None)
            if child is None:
                continue  # an orphaned grandchild re-parented to us: reaped, nothing else to do
            child.returncode = code
            if hasattr(child.handle, "returncode"):
                child.handle.returncode = code  # we reaped it; keep subprocess from waiting again
            for timer in child.timers:
                timer.cancel()
            self.children.pop(child.job, None)
            self.cleanup_group(child)
            self.on_exit(child)

    def cleanup_group(self, child: Child) -> None:
        """Kill what is left of the child's process group and its escaped descendants."""
        self.os.killpg(child.pid, signal.SIGKILL)
        others = frozenset(self._by_pid)  # live children of other jobs: their subtrees are theirs
        for pid in self.os.descendants_with_env("HERMES_JOB_ID", child.job, others):
            self.os.kill(pid, signal.SIGKILL)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every child's process group."""
        for child in list(self.children.values()):
            self.os.killpg(child.pid, sig)


def children_of(pid: str) -> list[int]:
    """Pids of the children of process ``pid`` (a pid or ``"self"``), from
    ``/proc/PID/task/*/children`` (Linux ≥ 3.5 with ``CONFIG_PROC_CHILDREN``;
    one small read per thread, not a scan of every process; psutil where the
    files are missing).  ``[]`` when the process is gone.
    """
    pids: set[int] = set()
    try:
        tasks = list(os.scandir(f"/proc/{pid}/task"))
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"{task.path}/children") as fh:
                pids.update(int(p) for p in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}"):
                return []
            try:  # a kernel without CONFIG_PROC_CHILDREN: psutil's scan of every process
                return [c.pid for c in psutil.Process(None if pid == "self" else int(pid)).children()]
            except psutil.Error:
                return []
        except OSError:
            continue  # the thread ended meanwhile
    return sorted(pids)


def sweep_leftovers(supervisor_id: str) -> list[int]:
    """Kill every process left by an earlier daemon of this state directory.

    Each child carries ``HERMES_SUPERVISOR=<state db path>`` in its environment
    (its tools' commands inherit it).  Returns the pids that were killed.
    """
    killed = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(SUPERVISOR_ENV) != supervisor_id:
                continue
            proc.kill()
            killed.append(proc.pid)
        except (psutil.Error, OSError) as exc:
            if getattr(exc, "errno", None) not in (None, errno.ESRCH):
                continue
    return killed
