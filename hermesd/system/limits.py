"""Per-child resource limits: memory, CPU seconds, processes, open files.

Where they come from: ``child_limits:`` in the config (the ceiling) and, per
job, ``memory_limit_mb``, ``cpu_limit_seconds``, ``max_processes`` and
``max_open_files`` on ``delegate`` (``hermesctl delegate --memory-limit …``),
which may only lower them.  The limits of a job are in force from its
child's first instruction and are inherited by every process it starts:

* **memory, everywhere**: what the job's processes really use — the memory of
  every process of its session or process group (proportional set size:
  :func:`hermesd.system.procfs.processes_of_sessions`), watched by the daemon
  (:class:`MemoryWatch`, every :data:`MEMORY_CHECK_SECONDS` or sooner); over the limit
  the largest process other than the agent is killed (``SIGKILL``) with the rest of
  its tool command (:func:`choose`), whose tool call fails naming the limit and what
  the command used (the ``child.tool_killed`` op tells the child) while the job goes
  on; only an agent over the limit on its own ends the job, failed, naming the limit.
  (Not ``RLIMIT_AS``: it counts address space, which a forked Python maps far beyond
  what it uses, so every job failed at start under a small limit.)  With a delegated
  cgroup, the cgroup's ``memory.max`` instead (below), and the same choice by the
  kernel's OOM killer: a tool's command runs with a higher ``oom_score_adj``
  (:data:`hermesd.system.rlimits.TOOL_OOM_SCORE_ADJ`) than the agent.
* **rlimits, everywhere** (setrlimit(2)): ``RLIMIT_CPU``
  (soft at the limit, which sends ``SIGXCPU``; hard :data:`CPU_GRACE` seconds
  later, ``SIGKILL``; per process), ``RLIMIT_NPROC`` (processes: counted per
  user by the kernel, so it is a ceiling for the user's processes, not the
  job's — the job's own count is the cgroup's ``pids.max``) and
  ``RLIMIT_NOFILE``.  They travel in the child's environment
  (:data:`hermesd.system.rlimits.ENV`, ``as=BYTES,cpu=SOFT:HARD,…``) and are set by
  whoever becomes the child: ``preexec_fn`` between fork and exec for a cold
  start, the spare once it has read its job for a warm start
  (:mod:`hermesd.system.rlimits`, a leaf the child side may import) — one encoding,
  read in both places.
* **cgroup v2, where the daemon has a delegated cgroup** (systemd
  ``Delegate=yes``): :class:`Cgroups` moves the daemon into a leaf
  ``hermesd/`` (the "no internal processes" rule), enables the ``memory`` and
  ``pids`` controllers for its children and gives each job a cgroup
  ``job-ID/`` with ``memory.max`` (and ``memory.swap.max`` 0), ``pids.max``;
  the child is moved in right after the spawn, before it runs any tool.
  Without a writable delegation (``cgroup.subtree_control`` not writable,
  controllers missing, cgroup v1) it is skipped, and said once in the log.

A child killed for exceeding a limit ends ``failed`` with the limit named
(:func:`exceeded`): ``SIGXCPU`` is "CPU time limit 10 s exceeded", a
``SIGKILL`` counted in the cgroup's ``memory.events`` ``oom_kill`` (beyond the kills
its tools were told of) or sent by the :class:`MemoryWatch` is "memory limit 256 MiB
exceeded".
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from hermesd.system import procfs, rlimits
from hermesd.protocol import arg

log = logging.getLogger("hermesd")

MEMORY_CHECK_SECONDS = 0.2
"""How often the :class:`MemoryWatch` measures the jobs with a memory limit and no cgroup."""
MEMORY_CHECK_MIN_SECONDS = 0.02
"""The shortest pause between two measures of a job growing fast towards its limit."""
CPU_GRACE = 5
"""Seconds of CPU between ``SIGXCPU`` (the soft limit) and ``SIGKILL`` (the hard one)."""
MIB = 1024 * 1024
REQUEST_FIELDS = {"memory_limit_mb": "memory_mb", "cpu_limit_seconds": "cpu_seconds",
                  "max_processes": "processes", "max_open_files": "open_files"}
"""``delegate`` arguments → :class:`Limits` fields."""


@dataclass(frozen=True)
class Limits:
    """One child's limits; None is unlimited (units: MiB, CPU seconds, counts)."""

    memory_mb: int | None = None
    cpu_seconds: int | None = None
    processes: int | None = None
    open_files: int | None = None

    def any(self) -> bool:
        """True when at least one limit is set."""
        return any(v is not None for v in asdict(self).values())

    def to_dict(self) -> dict[str, int]:
        """The set limits (for the job's spec and the child)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def env(self) -> dict[str, str]:
        """The rlimits for the child's environment (:func:`hermesd.system.rlimits.encode`; empty without any)."""
        items = {}
        if self.cpu_seconds is not None:
            items["cpu"] = (self.cpu_seconds, self.cpu_seconds + CPU_GRACE)
        if self.processes is not None:
            items["nproc"] = (self.processes, self.processes)
        if self.open_files is not None:
            items["nofile"] = (self.open_files, self.open_files)
        return rlimits.encode(items)


def ceiling(section: Any) -> Limits:
    """The config's ``child_limits:`` section as :class:`Limits`."""
    return Limits(section.memory_mb, section.cpu_seconds, section.processes, section.open_files)


def requested(args: dict[str, Any], ceiling_: Limits) -> dict[str, int]:
    """The limits a ``delegate`` request asks for (see :data:`REQUEST_FIELDS`), checked:
    integers ≥ 1 and not above the config's ceiling.  Raises ``ProtocolError(bad_request)``
    naming the field."""
    out = {}
    for name, key in REQUEST_FIELDS.items():
        most = getattr(ceiling_, key)
        value = arg(args, name, int, None, lo=1, hi=most if most is not None else 1 << 40)
        if value is not None:
            out[key] = value
    return out


def effective(ceiling_: Limits, job: dict[str, Any] | None) -> Limits:
    """A job's limits: the lower of the config's and the job's own (``spec["resources"]``)."""
    job = job or {}
    values = {}
    for key, most in asdict(ceiling_).items():
        mine = job.get(key)
        values[key] = most if mine is None else mine if most is None else min(most, mine)
    return Limits(**values)


def for_child(spec: dict[str, Any], resources: Limits) -> Limits:
    """The limits of the child process of a job with ``spec``: in a container job (``spec["container"]``,
    :mod:`hermesd.containers.engine`) the memory limit is the container's ``--memory``, where its commands
    run, not the child's ``RLIMIT_AS``, under which the engine's command line the child runs
    cannot start."""
    if spec.get("container") and resources.memory_mb is not None:
        return replace(resources, memory_mb=None)
    return resources


def exceeded(limits: Limits, returncode: int | None, oom_killed: bool, memory_used: int | None = None) -> str | None:
    """Which limit killed a child that exited with ``returncode`` (negative: a signal),
    as a sentence for the job's ``error``; None when none did.  ``oom_killed``: its cgroup
    counted an OOM kill its tools were not told of (it counts only for a child that died of
    ``SIGKILL``); ``memory_used``: the bytes its agent used when the :class:`MemoryWatch`
    killed the job."""
    if returncode == -signal.SIGXCPU and limits.cpu_seconds is not None:
        return f"CPU time limit {limits.cpu_seconds} s exceeded (SIGXCPU)"
    if returncode == -signal.SIGXCPU:
        return "CPU time limit exceeded (SIGXCPU)"
    if memory_used is not None:
        return (f"memory limit {limits.memory_mb} MiB exceeded: the agent's process used {memory_used / MIB:,.0f} MiB "
                "(killed by hermesd)")
    if oom_killed and returncode == -signal.SIGKILL:
        size = f" {limits.memory_mb} MiB" if limits.memory_mb is not None else ""
        return f"memory limit{size} exceeded (killed by the kernel's OOM killer in its cgroup)"
    return None


class Cgroups:
    """Per-job cgroups under the daemon's delegated cgroup v2 directory ``base``.

    Use :meth:`detect`; then :meth:`create` / :meth:`attach` per job,
    :meth:`oom_kills` (also while it runs) and :meth:`remove` once it is reaped.  Every write is a
    plain file write; an ``OSError`` in one job's cgroup is logged and that
    job runs with its rlimits only.
    """

    CONTROLLERS = ("memory", "pids")

    def __init__(self, base: Path):
        self.base = base

    @classmethod
    def detect(cls, mount: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")) -> "Cgroups | None":
        """The delegation this process has, set up for per-job cgroups; None (and one line in
        the log) when there is none it may write to.  Moves this process (with its threads)
        into ``base/hermesd`` first."""
        try:
            line = next((x for x in proc.read_text().splitlines() if x.startswith("0::")), None)
            if line is None:
                raise OSError("no cgroup v2 (unified) hierarchy for this process")
            if line[3:].strip("/") == "":
                raise OSError("this process is in the root cgroup, which is nobody's delegation")
            base = mount / line[3:].lstrip("/")
            available = (base / "cgroup.controllers").read_text().split()
            missing = [c for c in cls.CONTROLLERS if c not in available]
            if missing:
                raise OSError(f"controllers {', '.join(missing)} not delegated to {base}")
            if not os.access(base / "cgroup.subtree_control", os.W_OK) or not os.access(base, os.W_OK):
                raise OSError(f"{base} is not writable (no Delegate=yes)")
            me = base / "hermesd"
            me.mkdir(exist_ok=True)
            (me / "cgroup.procs").write_text(f"{os.getpid()}\n")
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in cls.CONTROLLERS))
        except (OSError, StopIteration) as exc:
            log.info("per-job cgroups off: %s (rlimits still apply)", exc)
            return None
        log.info("per-job cgroups under %s (memory.max, pids.max)", base)
        return cls(base)

    def path(self, job: str) -> Path:
        """``base/job-ID``."""
        return self.base / f"job-{job}"

    def create(self, job: str, limits: Limits) -> Path | None:
        """Make the job's cgroup with its limits; None when that failed (logged)."""
        path = self.path(job)
        try:
            path.mkdir(exist_ok=True)
            if limits.memory_mb is not None:
                (path / "memory.max").write_text(str(limits.memory_mb * MIB))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            if limits.processes is not None:
                (path / "pids.max").write_text(str(limits.processes))
            return path
        except OSError as exc:
            log.warning("cgroup of %s: %s", job, exc)
            return None

    def attach(self, job: str, pid: int, limits: Limits) -> bool:
        """Create the job's cgroup and move ``pid`` into it (before it starts anything)."""
        path = self.create(job, limits)
        if path is None:
            return False
        try:
            (path / "cgroup.procs").write_text(f"{pid}\n")
            return True
        except OSError as exc:
            log.warning("moving %s (pid %d) into %s: %s", job, pid, path, exc)
            return False

    def oom_kills(self, job: str) -> int:
        """How many processes of the job the kernel killed for its ``memory.max`` (``oom_kill``
        of its ``memory.events``, cgroup-v2.rst); 0 when unreadable."""
        try:
            text = (self.path(job) / "memory.events").read_text()
        except OSError:
            return 0
        counts = dict(line.split() for line in text.splitlines() if line.strip())
        return int(counts.get("oom_kill", 0))

    def remove(self, job: str) -> None:
        """Remove the job's cgroup (empty once its processes are reaped; ``EBUSY`` is logged)."""
        try:
            self.path(job).rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cgroup of %s not removed: %s", job, exc)


@dataclass(frozen=True)
class Overrun:
    """What :func:`choose` kills of a job over its memory limit: ``pids``, the processes of one
    tool command (``run``: their :data:`hermesd.system.rlimits.TOOL_RUN_ENV`, None for a process
    that carries none) using ``used`` bytes; or, with ``pids`` empty, the whole job, its agent
    using ``used`` bytes."""

    run: str | None
    pids: tuple[int, ...]
    used: int

    @property
    def whole_job(self) -> bool:
        """True when the job itself ends (its agent is over the limit)."""
        return not self.pids


def choose(agent: int, procs: list[procfs.Proc], limit: int, run_of: Callable[[int], str | None]) -> Overrun:
    """What to kill of a job whose processes ``procs`` use more than ``limit`` bytes together,
    ``agent`` the pid of its child, ``run_of(pid)`` the tool run a process belongs to
    (:data:`hermesd.system.rlimits.TOOL_RUN_ENV` of its environment, None without).

    As the kernel's OOM killer does in a cgroup (mm/oom_kill.c: the largest process, here
    with the agent's ``oom_score_adj`` below its tools'): the largest process other than the
    agent, with every process of the same tool run and their descendants — the command and
    what it started, the job going on; the agent only when it alone uses more than ``limit``
    (or nothing else is left to kill)."""
    own = sum(p.memory for p in procs if p.pid == agent)
    others = [p for p in procs if p.pid != agent]
    if own > limit or not others:
        return Overrun(None, (), own)
    largest = max(others, key=lambda p: p.memory)
    run = run_of(largest.pid)
    members = {p.pid for p in others if run is not None and run_of(p.pid) == run} | {largest.pid}
    grew = True
    while grew:  # what they started, the variable dropped or not
        more = {p.pid for p in others if p.ppid in members} - members
        members |= more
        grew = bool(more)
    return Overrun(run, tuple(sorted(members)), sum(p.memory for p in others if p.pid in members))


class MemoryWatch:
    """A job's memory limit where no cgroup holds it: on the event loop, only while such a
    job runs, the processes of each such child — its session and process group,
    :func:`hermesd.system.procfs.processes_of_sessions` — and, for each one over its
    ``limits.memory_mb``, what :func:`choose` picks: ``kill_command(child, overrun)`` (a tool's
    command and its processes; the job goes on) or ``kill(child, used_bytes)`` (the agent
    itself is over the limit; the job fails).

    ``children()``: the live children (``job → Child``; a child has ``job``, ``pid``, ``limits``,
    ``cgroup``, ``returncode``, ``memory_used``: set once it is killed whole).  Measured every ``interval`` seconds, sooner while a job's
    memory grows towards its limit (half the time its last growth rate leaves, at least
    :data:`MEMORY_CHECK_MIN_SECONDS`): a limit is a ceiling, not a reservation, and a job
    allocating fast may pass it by what it allocates in that time.  A process it killed is
    not counted again while it exits."""

    def __init__(self, children: Callable[[], dict[str, Any]], kill: Callable[[Any, int], None],
                 kill_command: Callable[[Any, Overrun], None], loop: Any, interval: float = MEMORY_CHECK_SECONDS):
        self.children, self.kill, self.kill_command = children, kill, kill_command
        self.loop, self.interval = loop, interval
        self._handle: Any = None
        self._last: dict[str, tuple[float, int]] = {}  # job → (loop time, bytes) of its last measure
        self._killed: dict[str, set[int]] = {}  # job → pids sent SIGKILL that have not exited yet

    def watched(self) -> list[Any]:
        """The live children whose memory limit only this watch enforces."""
        return [c for c in self.children().values()
                if c.limits.memory_mb is not None and not c.cgroup and c.returncode is None and c.memory_used is None]

    def start(self, wait: float | None = None) -> None:
        """Arm the timer: in ``wait`` seconds, else ``interval`` while a job is watched and a
        second otherwise (an idle daemon wakes once a second for it, and a new job is
        measured within a second of its start)."""
        if wait is None:
            wait = self.interval if self.watched() else 1.0
        self._handle = self.loop.call_later(wait, self._tick)

    def check(self) -> float:
        """Measure once and kill what is over its limit; returns the seconds until the next
        measure (``interval``, or less for a job growing towards its limit)."""
        watched = self.watched()
        for job in set(self._last) - {c.job for c in watched}:
            self._last.pop(job, None)
            self._killed.pop(job, None)
        if not watched:
            return self.interval
        found = procfs.processes_of_sessions({c.pid for c in watched})
        now, wait = self.loop.time(), self.interval
        for child in watched:
            killed = self._killed.setdefault(child.job, set())
            killed &= {p.pid for p in found[child.pid]}  # those gone are forgotten
            procs = [p for p in found[child.pid] if p.pid not in killed]
            used, limit = sum(p.memory for p in procs), child.limits.memory_mb * MIB
            last = self._last.get(child.job)
            self._last[child.job] = (now, used)
            if used <= limit:
                if last is not None and used > last[1] and now > last[0]:
                    left = (limit - used) / ((used - last[1]) / (now - last[0]))
                    wait = min(wait, max(MEMORY_CHECK_MIN_SECONDS, left / 2))
                continue
            overrun = choose(child.pid, procs, limit, lambda pid: procfs.env_value(pid, rlimits.TOOL_RUN_ENV))
            if overrun.whole_job:
                log.warning("%s: memory limit %d MiB exceeded, its agent using %d MiB: killing the job", child.job,
                            child.limits.memory_mb, overrun.used // MIB)
                self.kill(child, overrun.used)
                continue
            log.warning("%s: memory limit %d MiB exceeded (%d MiB used): killing the command using %d MiB "
                        "(%d process(es)); the job goes on", child.job, child.limits.memory_mb, used // MIB,
                        overrun.used // MIB, len(overrun.pids))
            killed.update(overrun.pids)
            self.kill_command(child, overrun)
            wait = MEMORY_CHECK_MIN_SECONDS  # soon again: still over once it is gone, the next goes too
        return wait

    def _tick(self) -> None:
        wait = None
        try:
            wait = self.check()
        except Exception:  # noqa: BLE001 - a watch that fails once must go on watching
            log.exception("measuring the memory of jobs failed")
        self.start(wait if self.watched() else None)

    def stop(self) -> None:
        """Disarm the timer."""
        if self._handle is not None:
            self._handle.cancel()
