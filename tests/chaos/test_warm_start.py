"""Warm start (``supervisor.start_method: forkserver``) with a real daemon.

A warm child must be indistinguishable from a cold one where it matters: its
parent is the daemon (which reaps it and learns its exit status), it leads its
own session and process group, it has its own working directory, log file and
environment (also as ``/proc/PID/environ`` shows it), its title names its job,
and it dies with the daemon.  When the zygote dies, children start cold and
the zygote comes back.
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from hermesd.config import Config
from tests.chaos.helpers import (assert_no_leftovers, delegate_warm, forkserver, live, proc_env, running_job,
                                 wait_warm, warm_on_start, zygote_pids)
from tests.harness import wait_for, command_line, process_name

SLEEPY = [{"text": "resting", "sleep": 60}]
WITH_GRANDCHILD = [{"text": "starting a long command",
                    "tool_calls": [{"name": "terminal", "input": {"command": "sleep 120", "timeout": 300}}]},
                   {"text": "done"}]


@pytest.fixture
def warm(make_daemon):
    """A forkserver daemon whose zygote is warm."""
    return warm_on_start(make_daemon(forkserver(), start=False)).start()


def test_warm_child_has_its_own_everything(warm):
    zygote = zygote_pids(warm)[-1]
    wait_for(lambda: warm.call("status")["start"] == {"method": "forkserver", "zygote": zygote, "spares": 2,
                                                      "starts": {"warm": 0, "cold": 0}},
             what="status naming the zygote, its two spares and no start yet")
    cwd = warm.work / "here"
    cwd.mkdir()
    rec = warm.delegate("isolated goal", cwd=str(cwd), script=SLEEPY)
    pid = running_job(warm, rec["id"])["pid"]
    child = psutil.Process(pid)
    env = proc_env(pid)
    assert env.get("HERMES_ZYGOTE") == str(zygote), "not forked from the zygote"
    assert env["HERMES_JOB_ID"] == rec["id"] and env["HERMES_SUPERVISOR"] == warm.supervisor_id
    assert "NOTIFY_SOCKET" not in env and "HERMES_ENV_ROOM" not in env and "HERMES_ZYGOTE_OF" not in env
    assert child.ppid() == warm.proc.pid, "a warm child must be the daemon's child"
    assert warm.call("status")["start"]["starts"] == {"warm": 1, "cold": 0}
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid
    assert child.cwd() == str(cwd)
    log = warm.home / "jobs" / rec["id"] / "log"
    # stdout and stderr: one pipe to the job's size-capped log writer (child/logwriter.py), which writes the log
    assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2")
    assert os.readlink(f"/proc/{pid}/fd/1").startswith("pipe:") and log.is_file()
    assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    wait_for(lambda: command_line(child).startswith(f"hermes-child {rec['id']} delegation isolated goal"),
             what="process title")
    warm.call("cancel", id=rec["id"])
    assert warm.wait_job(rec["id"])["status"] == "cancelled"  # terminal at its result, maybe before its exit
    wait_for(lambda: not live(pid), timeout=10, what="the cancelled child gone")


def test_warm_children_differ_from_each_other(warm):
    script = [{"text": "x", "tool_calls": [{"name": "terminal", "input": {
        "command": "echo $HERMES_JOB_ID $HERMES_ZYGOTE > who.txt"}}]}, {"text": "done"}]
    recs = []
    for i in range(3):
        cwd = warm.work / f"w{i}"
        cwd.mkdir()
        recs.append((cwd, delegate_warm(warm, f"job {i}", cwd=str(cwd), script=script, toolsets=["terminal"])))
    for cwd, rec in recs:
        assert warm.wait_job(rec["id"])["status"] == "completed"
        job, zygote = (cwd / "who.txt").read_text().split()
        assert job == rec["id"] and int(zygote) == zygote_pids(warm)[-1]
    pids = {warm.call("job", id=rec["id"])["pid"] for _, rec in recs}
    assert len(pids) == 3


def test_daemon_reaps_a_warm_child_and_learns_its_status(warm):
    rec = warm.delegate("die hard", script=SLEEPY)
    pid = running_job(warm, rec["id"])["pid"]
    os.kill(pid, signal.SIGKILL)
    final = warm.wait_job(rec["id"])
    assert final["status"] == "failed" and "status -9" in final["error"]
    zombies = [p for p in psutil.process_iter(["ppid", "status"])
               if p.info["ppid"] == warm.proc.pid and p.info["status"] == psutil.STATUS_ZOMBIE]
    assert zombies == []


def test_kill9_of_daemon_ends_warm_children_grandchildren_and_zygote(warm):
    zygote = zygote_pids(warm)[-1]
    recs = [warm.delegate(f"orphan {i}", background=True, script=WITH_GRANDCHILD) for i in range(2)]
    pids = {running_job(warm, r["id"])["pid"] for r in recs}
    wait_for(lambda: any(process_name(p) == "sleep" for p in warm.children()), what="grandchild sleep")
    warm.kill9()
    assert_no_leftovers(warm, {r["id"] for r in recs}, pids | {zygote}, timeout=5)


def test_zygote_death_keeps_the_spares_then_cold_then_warm_again(warm):
    first = zygote_pids(warm)[-1]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: "zygote lost" in warm.log(), what="the daemon noticing the zygote's death on its own")
    recs = [warm.delegate(f"on a held spare {i}", script=SLEEPY) for i in range(2)]
    for rec in recs:  # the spares the daemon held outlive their zygote
        assert proc_env(running_job(warm, rec["id"])["pid"]).get("HERMES_ZYGOTE") == str(first)
    rec = warm.delegate("while the zygote is gone", script=SLEEPY)
    env = proc_env(running_job(warm, rec["id"])["pid"])
    if len(zygote_pids(warm)) == 1:  # the new zygote is still warming up
        assert "HERMES_ZYGOTE" not in env, "no spare left and no zygote: should have started cold"
    recs.append(rec)
    second = wait_warm(warm, 2)
    assert second != first
    rec = warm.delegate("warm again", script=SLEEPY)
    assert proc_env(running_job(warm, rec["id"])["pid"]).get("HERMES_ZYGOTE") == str(second)
    for r in [*recs, rec]:
        warm.call("cancel", id=r["id"])
        warm.wait_job(r["id"])


def test_graceful_shutdown_leaves_nothing(warm):
    zygote = zygote_pids(warm)[-1]
    recs = [warm.delegate(f"long {i}", background=True, script=WITH_GRANDCHILD) for i in range(2)]
    pids = {running_job(warm, r["id"])["pid"] for r in recs}
    assert warm.stop() == 0
    assert_no_leftovers(warm, {r["id"] for r in recs}, pids | {zygote}, timeout=5)


def test_warm_start_is_the_default():
    assert Config().supervisor.start_method == "forkserver"


def test_spawn_stays_selectable_and_starts_cold(make_daemon):
    daemon = make_daemon({"supervisor": {"start_method": "spawn"}})
    rec = daemon.delegate("cold", script=SLEEPY)
    pid = running_job(daemon, rec["id"])["pid"]
    assert "HERMES_ZYGOTE" not in proc_env(pid)
    assert "hermes-zygote" not in " ".join(command_line(p) for p in daemon.children())
    assert daemon.call("status")["start"] == {"method": "spawn"}
    daemon.call("cancel", id=rec["id"])
    daemon.wait_job(rec["id"])
