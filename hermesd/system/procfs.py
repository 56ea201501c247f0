"""What the daemon reads about processes from ``/proc`` (Linux, proc(5)).

The daemon needs five facts about processes that are not its jobs' own
bookkeeping: a process's children, a variable of its environment (``KEY=value``),
its start time, the list of every process (the sweep of leftovers at start)
and the processes of a job's session with the memory each uses (a memory limit
without a cgroup).  psutil would answer all five, but importing it costs the
idle daemon about a megabyte of resident memory (bench/README.md), for five reads of
documented files.  Clients, children and tests keep using psutil.

Every function raises nothing for a process that is gone or unreadable (it
answers ``[]``, ``False`` or ``None``): between listing a process and reading
it, it may exit.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

__all__ = ["children_of", "has_env", "env_value", "start_time", "all_pids", "Proc", "processes_of_sessions"]


def children_of(pid: int | str) -> list[int]:
    """Pids of the children of process ``pid`` (a pid or ``"self"``), sorted.

    From ``/proc/PID/task/*/children`` (Linux ≥ 3.5 with
    ``CONFIG_PROC_CHILDREN``: one small read per thread, not a scan of every
    process); where those files are missing, by the parent pid of every
    process (``/proc/*/stat``).  ``[]`` when the process is gone.
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
            target = os.getpid() if pid == "self" else int(pid)
            return sorted(p for p in all_pids() if (fields := _stat(p)) is not None and int(fields[1]) == target)
        except OSError:
            continue  # the thread ended meanwhile
    return sorted(pids)


def has_env(pid: int, key: str, value: str) -> bool:
    """True when process ``pid``'s environment (``/proc/PID/environ``, as the process
    last left it) holds ``key=value`` exactly."""
    return env_value(pid, key) == value


def env_value(pid: int, key: str) -> str | None:
    """The value of ``key`` in process ``pid``'s environment (``/proc/PID/environ``, as the
    process last left it); None when it has none, or is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    prefix = f"{key}=".encode("utf-8", "surrogateescape")
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "surrogateescape")
    return None


def start_time(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (as psutil's
    ``create_time``: boot time plus field 22 of ``/proc/PID/stat`` in clock ticks);
    None when it is gone."""
    fields = _stat(pid)
    if fields is None:
        return None
    return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    """One process of a session as :func:`processes_of_sessions` reads it: ``pid``, its parent's
    ``ppid`` and the bytes of memory it uses (``memory``: see there)."""

    pid: int
    ppid: int
    memory: int


def processes_of_sessions(sessions: set[int]) -> dict[int, list[Proc]]:
    """The processes of each session (or process group) id in ``sessions``, over one scan of
    ``/proc/*/stat`` (fields 4, 5 and 6: ppid, pgrp, session), with the memory each uses: its
    proportional set size (``Pss`` of ``/proc/PID/smaps_rollup``, Linux ≥ 4.14: a page shared
    by n processes counts 1/n, so what a fork shares with its parent is not counted twice),
    else its resident set (field 24, ``rss``, in pages).  A zombie (state ``Z``) uses none and
    is left out."""
    found: dict[int, list[Proc]] = {s: [] for s in sessions}
    if not found:
        return found
    for pid in all_pids():
        fields = _stat(pid)
        if fields is None or fields[0] == "Z":
            continue
        owner = next((int(f) for f in (fields[3], fields[2]) if int(f) in found), None)
        if owner is not None:
            found[owner].append(Proc(pid, int(fields[1]), _pss(pid) or int(fields[21]) * _PAGE))
    return found


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _pss(pid: int) -> int | None:
    """``Pss`` of ``/proc/PID/smaps_rollup`` in bytes; None when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def all_pids() -> list[int]:
    """Every process's pid (the numeric entries of ``/proc``)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (index 0: the state, field 3
    of proc(5)); None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data.rsplit(b")", 1)[1].decode("ascii", "replace").split()


@functools.lru_cache(maxsize=1)
def _boot_time() -> float:
    """The ``btime`` line of ``/proc/stat``: when the system booted, seconds since the epoch."""
    with open("/proc/stat", "rb") as fh:
        for line in fh:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    return 0.0
