"""Shutdown, kill -9 and restart, already-running refusal, socket permissions."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import psutil
import pytest

from hermesd.protocol import ProtocolError
from tests.harness import wait_for

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

# a child that starts a grandchild (sleep) through the terminal tool, then waits
GRANDCHILD = [{"text": "starting a long command",
               "tool_calls": [{"name": "terminal", "input": {"command": "sleep 120", "timeout": 300}}]},
              {"text": "done"}]


def _running(daemon, job_id):
    return daemon.call("job", id=job_id)["status"] == "running"


def _has_grandchild(daemon):
    return any("sleep" in p.name() for p in daemon.children())


def test_sigterm_stops_children_and_grandchildren(daemon):
    recs = [daemon.delegate(f"long {i}", background=True, script=GRANDCHILD, resume=False) for i in range(2)]
    wait_for(lambda: all(_running(daemon, r["id"]) for r in recs), what="children running")
    wait_for(lambda: _has_grandchild(daemon), what="grandchild sleep")
    daemon_pid = daemon.proc.pid
    assert daemon.stop() == 0
    assert daemon.children() == []
    zombies = [p for p in psutil.process_iter(["ppid", "status"])
               if p.info["ppid"] == daemon_pid and p.info["status"] == psutil.STATUS_ZOMBIE]
    assert zombies == []
    assert not (daemon.runtime / "hermesd.sock").exists()
    # final states were persisted: a restarted daemon shows them interrupted, not lost
    daemon.start()
    for rec in recs:
        final = daemon.call("job", id=rec["id"])
        assert final["status"] == "interrupted", final
    events = daemon.call("events_since", since=0, types=["async_delegation"])["events"]
    assert sorted(e["job"] for e in events) == sorted(r["id"] for r in recs)


def test_kill9_children_die_and_restart_reports_lost(daemon):
    recs = [daemon.delegate(f"orphan {i}", background=True, script=GRANDCHILD, resume=False) for i in range(3)]
    wait_for(lambda: all(_running(daemon, r["id"]) for r in recs), what="children running")
    wait_for(lambda: _has_grandchild(daemon), what="grandchild sleep")
    daemon.kill9()
    wait_for(lambda: daemon.children() == [], timeout=2.0, what="every child and grandchild gone within 2 s")
    daemon.start()
    for rec in recs:
        final = daemon.wait_job(rec["id"], timeout=5)
        assert final["status"] in ("lost", "interrupted")
    notes = daemon.call("events_since", since=0, types=["async_delegation"])["events"]
    assert sorted(e["job"] for e in notes) == sorted(r["id"] for r in recs)
    assert all(e["data"]["status"] in ("lost", "interrupted") and e["data"]["block"] for e in notes)
    # the restarted daemon still works
    rec = daemon.delegate("after restart")
    assert daemon.wait_job(rec["id"])["status"] == "completed"


def test_second_daemon_refused_and_stale_socket_replaced(daemon, tmp_path):
    second = subprocess.run([sys.executable, "-m", "hermesd.cli", "run"], env=daemon.env,
                            capture_output=True, text=True, timeout=20)
    assert second.returncode == 1
    assert "already running" in second.stderr
    daemon.kill9()
    assert (daemon.runtime / "hermesd.sock").exists()  # stale, left by kill -9
    daemon.start()
    assert daemon.call("hello")["pid"] == daemon.proc.pid


def test_second_daemon_on_the_same_state_directory_refused(daemon, tmp_path):
    rec = daemon.delegate("keep running", background=True, script=[{"text": "resting", "sleep": 60}])
    wait_for(lambda: daemon.call("job", id=rec["id"])["status"] == "running", what="the job running")
    other_runtime = tmp_path / "other-run"
    second = subprocess.run([sys.executable, "-m", "hermesd.cli", "run"],
                            env={**daemon.env, "HERMES_RUNTIME_DIR": str(other_runtime)},
                            capture_output=True, text=True, timeout=20)
    assert second.returncode == 1
    assert f"already running (pid {daemon.proc.pid}) with state directory" in second.stderr
    assert daemon.call("job", id=rec["id"])["status"] == "running"  # its children were left alone
    daemon.call("cancel", id=rec["id"])


def test_runtime_dir_and_socket_permissions(daemon):
    mode = stat.S_IMODE(os.stat(daemon.runtime).st_mode)
    assert mode == 0o700
    for name in ("hermesd.sock", "events.sock", "children.sock"):
        st = os.stat(daemon.runtime / name)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600, name


def test_shutdown_op_refuses_new_work_and_exits_zero(daemon):
    conn = daemon.conn()
    assert conn.call("shutdown")["stopping"] is True
    with pytest.raises(Exception):
        for _ in range(100):
            conn.call("delegate", goal="too late", cwd=str(daemon.work))
    assert daemon.proc.wait(20) == 0


def test_hello_reports_versions(daemon):
    hello = daemon.call("hello")
    assert hello["protocol"] == 1 and hello["pid"] == daemon.proc.pid
    assert "delegate" in hello["ops"] and hello["uptime_seconds"] >= 0
    with pytest.raises(ProtocolError) as info:
        daemon.call("no_such_op")
    assert info.value.code == "unknown_op"


def test_a_module_in_a_jobs_directory_shadows_none_of_the_runtime(daemon):
    """Children (cold, from the zygote, Ray items) are ``python -P -m child``: a ``logging.py`` in
    the job's working directory is not imported in place of the standard library's."""
    cwd = daemon.work / "shadowing"
    cwd.mkdir()
    for name in ("logging", "json", "zmq", "child"):
        (cwd / f"{name}.py").write_text("raise SystemExit('shadowed')\n")
    job = daemon.wait_job(daemon.delegate("in a directory of traps", cwd=str(cwd))["id"])
    assert job["status"] == "completed", job


def _inodes(pid: int) -> list[str]:
    """The eventfd and eventpoll descriptors ``pid`` holds (what a ZeroMQ context and an asyncio loop
    hold; pidfds, whose number follows the children, are left out)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target in ("anon_inode:[eventfd]", "anon_inode:[eventpoll]"):
            found.append(target)
    return sorted(found)


def test_a_restart_over_a_stale_socket_holds_no_more_descriptors_than_a_clean_start(daemon):
    # Found by the soak (issue 44): the start-up probe of a stale control socket (left by a
    # kill -9) made a second ZeroMQ context and kept it: 5 descriptors (3 eventfd, 2 eventpoll)
    # and its two threads for the daemon's whole life.
    clean = _inodes(daemon.proc.pid)
    daemon.kill9()
    assert (daemon.runtime / "hermesd.sock").exists()  # the stale socket the next start probes
    daemon.start()
    assert _inodes(daemon.proc.pid) == clean
