"""Shared checks of the chaos suite: warm daemons, leftovers, invariants after a crash.

The suite kills daemons, children and model servers on purpose; every test
still ends everything it started (the ``make_daemon`` fixture cleans up, and
the checks here poll with deadlines instead of sleeping).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.harness import DaemonProc, processes_with_env, wait_for

READY = re.compile(r"hermes-zygote\[(\d+)\]: warm and ready")
TERMINAL = {"completed", "failed", "interrupted", "timed_out", "cancelled", "lost"}
SOAK = int(os.environ.get("HERMES_CHAOS_SOAK", "0") or 0)
"""Rounds of the opt-in soak (``HERMES_CHAOS_SOAK=N``); 0 runs the short default."""


def forkserver(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """``config`` with ``supervisor.start_method: forkserver``."""
    config = dict(config or {})
    config["supervisor"] = {**config.get("supervisor", {}), "start_method": "forkserver"}
    return config


def zygote_pids(daemon: DaemonProc) -> list[int]:
    """Pids of every zygote that said ready in this daemon's log, oldest first."""
    return [int(m) for m in READY.findall(daemon.log())]


def wait_warm(daemon: DaemonProc, count: int = 1, timeout: float = 120.0) -> int:
    """Wait until ``count`` zygotes have said ready in the log; returns the last one's pid."""
    wait_for(lambda: len(zygote_pids(daemon)) >= count, timeout, 0.05, f"zygote #{count} warm")
    return zygote_pids(daemon)[-1]


def warm_on_start(daemon: DaemonProc) -> DaemonProc:
    """Make ``daemon.start()`` also wait for its zygote to be warm (restarts included)."""
    plain_start = daemon.start

    def start(timeout: float = 15.0) -> DaemonProc:
        before = len(zygote_pids(daemon))
        plain_start(timeout)
        wait_warm(daemon, before + 1)
        return daemon

    daemon.start = start
    return daemon


def delegate_warm(daemon: DaemonProc, goal: str, **args: Any) -> dict[str, Any]:
    """``delegate`` once the daemon holds a spare, so the child is forked warm (with no
    spare at hand a job starts cold at once, and the spares catch up)."""
    wait_for(lambda: daemon.call("status")["start"].get("spares"), 60, 0.01, "a spare held")
    return daemon.delegate(goal, **args)


def running_job(daemon: DaemonProc, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until job ``job_id`` is ``running``; returns its record (with ``pid``)."""
    wait_for(lambda: daemon.call("job", id=job_id)["status"] == "running", timeout, 0.02, f"{job_id} running")
    return daemon.call("job", id=job_id)


def status_of(pid: int) -> str:
    """``psutil`` status of ``pid`` ('' when gone)."""
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return ""


def proc_env(pid: int) -> dict[str, str]:
    """``/proc/PID/environ`` of ``pid`` ({} when gone)."""
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def live(pid: int) -> bool:
    """True when ``pid`` runs (zombies count as gone)."""
    return status_of(pid) not in ("", psutil.STATUS_ZOMBIE)


def titled(job_ids: set[str]) -> list[psutil.Process]:
    """Live processes whose title names one of ``job_ids`` (``hermes-child <id> …``)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        words = " ".join(proc.info["cmdline"] or []).split()
        if proc.info["status"] != psutil.STATUS_ZOMBIE and len(words) > 1 and words[0] == "hermes-child" \
                and words[1] in job_ids:
            found.append(proc)
    return found


def leftovers(daemon: DaemonProc, job_ids: set[str] = frozenset(), pids: set[int] = frozenset()) -> list[Any]:
    """Everything of ``daemon`` still alive: processes with its ``HERMES_SUPERVISOR``,
    processes titled with one of ``job_ids``, and live ``pids``."""
    found = {p.pid for p in daemon.children()} | {p.pid for p in titled(set(job_ids))}
    found |= {pid for pid in pids if live(pid)}
    return sorted(found)


def assert_no_leftovers(daemon: DaemonProc, job_ids: set[str] = frozenset(), pids: set[int] = frozenset(),
                        timeout: float = 10.0) -> None:
    """Wait until nothing of ``daemon`` is alive; fail naming what is."""
    try:
        wait_for(lambda: not leftovers(daemon, job_ids, pids), timeout, 0.05, "no process left")
    except AssertionError:
        rest = [(p, " ".join(psutil.Process(p).cmdline())[:80]) for p in leftovers(daemon, job_ids, pids) if live(p)]
        raise AssertionError(f"processes left behind: {rest}") from None


def of_daemon(pid: int) -> list[psutil.Process]:
    """Live processes started for the daemon of ``pid`` (``HERMES_DAEMON_PID`` in their environment)."""
    return processes_with_env("HERMES_DAEMON_PID", str(pid))


def all_jobs(daemon: DaemonProc) -> list[dict[str, Any]]:
    """Every job record of the daemon."""
    return daemon.call("ps", all=True)["jobs"]


def settled(daemon: DaemonProc, timeout: float = 60.0, kinds: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Wait until no job (of ``kinds``, default all) is non-terminal; returns the jobs."""
    def done() -> list[dict[str, Any]] | None:
        jobs = [j for j in all_jobs(daemon) if not kinds or j["kind"] in kinds]
        return jobs if all(j["status"] in TERMINAL for j in jobs) else None

    try:
        return wait_for(done, timeout, 0.1, "every job terminal")
    except AssertionError:
        stuck = [(j["id"], j["status"]) for j in all_jobs(daemon) if j["status"] not in TERMINAL]
        raise AssertionError(f"jobs stuck non-terminal: {stuck}") from None


def notifications(daemon: DaemonProc) -> Counter:
    """How many ``async_delegation`` completion events each job has."""
    events = daemon.call("events_since", since=0, types=["async_delegation"], limit=100000)["events"]
    return Counter(e["job"] for e in events)


def delivered(daemon: DaemonProc, session: str) -> Counter:
    """How many times each job's completion was delivered into ``session``'s history."""
    messages = daemon.call("session.history", session=session)["messages"]
    return Counter(m["notification"] for m in messages if m.get("notification"))


ROOT = os.geteuid() == 0


@contextlib.contextmanager
def mounted(kind: str, path: Path, *options: str):
    """Mount (``tmpfs``, or ``bind-ro`` of ``path`` onto itself) for the block; root only."""
    if not ROOT:
        pytest.skip("needs root to mount")
    steps = {"tmpfs": [["mount", "-t", "tmpfs", "-o", ",".join(("size=4m", *options)), "tmpfs", str(path)]],
             "bind-ro": [["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,bind,ro", str(path)]]}
    done = subprocess.run(steps[kind][0], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount: {done.stderr.strip()}")
    try:
        for step in steps[kind][1:]:
            subprocess.run(step, check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` read-only for the block: a bind mount as root, else its mode bits."""
    if ROOT:
        with mounted("bind-ro", path):
            yield
        return
    mode = path.stat().st_mode
    path.chmod(0o555)
    try:
        yield
    finally:
        path.chmod(mode)
