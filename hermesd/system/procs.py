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
both sides of every race deterministically.  *How* a child starts is a
strategy the process manager owns (:class:`Spawner`): :class:`ColdSpawner`
(``start_method: spawn``) or :class:`hermesd.warm.spawner.WarmSpawner`
(``forkserver``, the default).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol


from hermesd.system import limits, procfs, rlimits
from hermesd.contract.launch import PYTHON

SCRUBBED_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
SUPERVISOR_ENV = "HERMES_SUPERVISOR"


class OS:
    """The real operating system, plain syscalls: spawn (fork and exec), signal, wait, process lookups."""

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """Start ``argv`` in a new session; returns a handle with ``.pid``.

        The rlimits named in ``env`` (:data:`hermesd.system.rlimits.ENV`) are set in the
        child before it runs.  Raises ``OSError`` when the program or ``cwd``
        cannot be used.
        """
        with open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600), "ab",
                  buffering=0) as log:
            return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                    preexec_fn=rlimits.preexec(env))  # the job's rlimits, before exec

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
        todo = [pid for pid in procfs.children_of("self") if pid not in skip]
        while todo:
            pid = todo.pop()
            todo.extend(procfs.children_of(str(pid)))
            if procfs.has_env(pid, key, value):
                found.append(pid)
        return found

    def start_time(self, pid: int) -> float | None:
        """The process's start time (seconds since the epoch), or None when gone."""
        return procfs.start_time(pid)


class Spawner(Protocol):
    """How the process manager starts a child: cold (:class:`ColdSpawner`) or warm
    (:class:`hermesd.warm.spawner.WarmSpawner`).  A strategy, not a syscall: the OS
    calls stay behind :class:`OS`."""

    method: str

    def start(self) -> None:
        """Prepare (at daemon start, after the leftover sweep); never blocks."""

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """Start the child runtime ``argv``; a handle with ``.pid``.  Raises ``OSError``."""

    def reaped(self, exits: list[tuple[int, int]]) -> None:
        """The daemon reaped ``exits`` (``(pid, returncode)``), its children's and others'."""

    def describe(self) -> dict[str, Any]:
        """For ``status``: ``{"method": …}`` and what the strategy can tell; only reads."""

    def own_pids(self) -> frozenset[int]:
        """Processes of the strategy's own among the daemon's children (a zygote, spares):
        no job's, so no search for a job's escaped descendants looks into them."""

    def expect(self, provider: str | None) -> None:
        """A job runs with model provider ``provider`` (None: the default): a strategy that
        prepares children ahead of time prepares them for it too."""

    def at_hand(self) -> bool:
        """True when a child started now starts as fast as this strategy can start one;
        False while a faster start is on its way (a warm spare being forked): a job type
        that paces its own starts (batch) may wait for :meth:`subscribe`'s call."""

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` from the event loop whenever :meth:`at_hand` may have turned true."""

    def close(self) -> None:
        """Stop what :meth:`start` started (at shutdown)."""


class ColdSpawner:
    """``supervisor.start_method: spawn``: a new interpreter per child (``OS.spawn``)."""

    method = "spawn"

    def __init__(self, os_seam: OS):
        self.os = os_seam

    def start(self) -> None:
        """Nothing to prepare."""

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """``OS.spawn``: the child runs ``argv`` in a new session, output to ``log_path``."""
        return self.os.spawn(argv, cwd=cwd, env=env, log_path=log_path)

    def reaped(self, exits: list[tuple[int, int]]) -> None:
        """Nothing of its own to watch."""

    def describe(self) -> dict[str, Any]:
        """``{"method": "spawn"}``."""
        return {"method": self.method}

    def own_pids(self) -> frozenset[int]:
        """None: every child is a job's."""
        return frozenset()

    def expect(self, provider: str | None) -> None:
        """Nothing to prepare: each child imports what it needs."""

    def at_hand(self) -> bool:
        """Always: a cold start is the only kind."""
        return True

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Nothing to tell: :meth:`at_hand` is always true."""

    def close(self) -> None:
        """Nothing to stop."""


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
    limits: limits.Limits = field(default_factory=limits.Limits)
    oom_killed: bool = False
    cgroup: bool = False  # its limits are held by a cgroup of its own
    memory_used: int | None = None  # bytes its agent used when the job was killed for its memory limit
    tool_kills: dict[str, int] = field(default_factory=dict)  # tool run → bytes its command used, killed
    oom_seen: int = 0  # the kernel's OOM kills in its cgroup its tools were told of (child.tool_killed)


ExitCallback = Callable[[Child], None]


class ProcessManager:
    """The live children of this daemon.

    ``loop`` schedules the escalation timers (``call_later``); ``on_exit`` is
    called once per child after it is reaped and its group cleaned up.
    ``grace`` is the pause in seconds between the steps of a graceful stop.
    ``os_seam``: the syscalls (default :class:`OS`); ``spawner``: how children
    start (default :class:`ColdSpawner` on ``os_seam``).
    """

    def __init__(self, loop: Any, on_exit: ExitCallback, *, os_seam: OS | None = None,
                 spawner: Spawner | None = None, grace: float = 3.0, supervisor_id: str = ""):
        self.loop = loop
        self.on_exit = on_exit
        self.os = os_seam or OS()
        self.spawner = spawner or ColdSpawner(self.os)
        self.grace = grace
        self.supervisor_id = supervisor_id
        self.children: dict[str, Child] = {}
        self._by_pid: dict[int, Child] = {}
        self.cgroups: limits.Cgroups | None = None  # set when the daemon has a delegated cgroup
        self.watched: dict[int, Callable[[int], None]] = {}

    def start(self, job: str, *, cwd: str, log_path: Path, env: dict[str, str], title: list[str] = (),
              resources: limits.Limits | None = None) -> Child:
        """Start the child of ``job`` with the spawner.  Raises ``OSError`` when it cannot start.

        ``title`` words follow ``python -m child`` in argv: they show in ``ps``
        from the first instant and reserve the room setproctitle then rewrites
        (``SPT_NOENV=1`` keeps it from clobbering the environment, which must
        stay readable in ``/proc/PID/environ`` for the leftover sweep).
        ``resources``: the child's limits — rlimits through its environment,
        and its own cgroup when the daemon has a delegated one.
        """
        argv = [*PYTHON, "-m", "child", job, *title]
        resources = resources or limits.Limits()
        extra = {"HERMES_JOB_ID": job, SUPERVISOR_ENV: self.supervisor_id, "HERMES_DAEMON_PID": str(os.getpid()),
                 "SPT_NOENV": "1", **resources.env()}
        handle = self.spawner.spawn(argv, cwd=cwd, env=child_env(os.environ, {**env, **extra}), log_path=log_path)
        child = Child(job, handle.pid, handle, limits=resources)
        if self.cgroups is not None and (resources.memory_mb or resources.processes):
            child.cgroup = self.cgroups.attach(job, child.pid, resources)
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

    def kill_for_memory(self, child: Child, used: int) -> None:
        """SIGKILL the child's process group: its agent uses ``used`` bytes, over its memory limit."""
        if child.memory_used is None:
            child.memory_used = used
            self._escalate(child, signal.SIGKILL)

    def kill_command_for_memory(self, child: Child, overrun: limits.Overrun) -> None:
        """SIGKILL the processes of one tool command of the child (``overrun.pids``), over its
        memory limit; what it used is kept under its run for the child's question
        (``child.tool_killed``).  The job goes on."""
        if overrun.run is not None:
            child.tool_kills[overrun.run] = overrun.used
        for pid in overrun.pids:
            self.os.kill(pid, signal.SIGKILL)

    def _escalate(self, child: Child, sig: int) -> None:
        if child.returncode is None:
            self.os.killpg(child.pid, sig)

    def watch(self, pid: int, callback: Callable[[int], None]) -> None:
        """Call ``callback(returncode)`` when the process ``pid`` (ours, not a job's) is reaped."""
        self.watched[pid] = callback

    def reap(self) -> None:
        """Reap every exited process; finish the bookkeeping of our children (the spawner
        hears of every exit: a zygote or a spare may be among them)."""
        exits = self.os.reap()
        self.spawner.reaped(exits)
        for pid, code in exits:
            child = self._by_pid.pop(pid, None)
            if child is None:
                callback = self.watched.pop(pid, None)
                if callback is not None:  # a process of ours that is no job (an operator's hook)
                    callback(code)
                continue  # or an orphaned grandchild re-parented to us: reaped, nothing else to do
            child.returncode = code
            if hasattr(child.handle, "returncode"):
                child.handle.returncode = code  # we reaped it; keep subprocess from waiting again
            for timer in child.timers:
                timer.cancel()
            self.children.pop(child.job, None)
            self.cleanup_group(child)
            if self.cgroups is not None:
                child.oom_killed = self.cgroups.oom_kills(child.job) > child.oom_seen
                self.cgroups.remove(child.job)
            self.on_exit(child)

    def cleanup_group(self, child: Child) -> None:
        """Kill what is left of the child's process group and its escaped descendants."""
        self.os.killpg(child.pid, signal.SIGKILL)
        # live children of other jobs (their subtrees are theirs), processes of ours that are no
        # job's (an operator's hook: it carries the job's id in its environment, and may start
        # before the job's process is reaped), the zygote and the held spares
        others = frozenset(self._by_pid) | frozenset(self.watched) | self.spawner.own_pids()
        for pid in self.os.descendants_with_env("HERMES_JOB_ID", child.job, others):
            self.os.kill(pid, signal.SIGKILL)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every child's process group."""
        for child in list(self.children.values()):
            self.os.killpg(child.pid, sig)


def sweep_leftovers(supervisor_id: str) -> list[int]:
    """Kill every process left by an earlier daemon of this state directory.

    Each child carries ``HERMES_SUPERVISOR=<state db path>`` in its environment
    (its tools' commands inherit it).  Returns the pids that were killed.
    """
    killed = []
    me = os.getpid()
    for pid in procfs.all_pids():
        if pid == me or not procfs.has_env(pid, SUPERVISOR_ENV, supervisor_id):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            continue  # gone meanwhile, or not ours to signal
    return killed
