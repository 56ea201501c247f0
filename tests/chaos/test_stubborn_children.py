"""Children that make stopping hard: they ignore SIGINT/SIGTERM, fork
grandchildren and a double-forked grandchild that leaves the process group,
or flood their output.  Whatever they do, a stop ends every one of their
processes, and the daemon stays responsive meanwhile."""

from __future__ import annotations

import os
import time

import pytest

from tests.chaos.helpers import (assert_no_leftovers, forkserver, live, running_job, status_of, titled,
                                 warm_on_start)
from tests.harness import wait_for, process_name

# The command stops its own child (SIGSTOP: SIGINT and SIGTERM stay pending), then
# ignores TERM and INT itself, as the sleep it leaves running does.
STUBBORN = [{"text": "going stubborn", "tool_calls": [{"name": "terminal", "input": {
    "command": "trap '' TERM INT; kill -STOP $PPID; sleep 100", "timeout": 300}}]}, {"text": "never"}]

# Grandchildren in the child's group, one in a subshell, and one double-forked
# into a session of its own (setsid): the process group no longer reaches it.
FORKER = [{"text": "leaving processes behind", "tool_calls": [{"name": "terminal", "input": {
    "command": "sleep 301 & (sleep 302 &); (setsid sleep 303 &); echo forked"}}]},
          {"text": "resting", "sleep": 100}]


def _sleeps(daemon, *seconds: int) -> bool:
    wanted = {str(s) for s in seconds}
    found = {p.cmdline()[-1] for p in daemon.children() if process_name(p) == "sleep"}
    return wanted <= found


@pytest.fixture(params=["spawn", "forkserver"])
def any_daemon(request, make_daemon):
    """A daemon with cold start, and one with warm start."""
    if request.param == "spawn":
        return make_daemon()
    return warm_on_start(make_daemon(forkserver(), start=False)).start()


def test_child_ignoring_sigint_and_sigterm_is_killed_on_cancel(any_daemon):
    d = any_daemon
    rec = d.delegate("stubborn", script=STUBBORN)
    pid = running_job(d, rec["id"])["pid"]
    wait_for(lambda: _sleeps(d, 100), what="the stubborn command")
    wait_for(lambda: status_of(pid) == "stopped", what="child stopped")
    t0 = time.monotonic()
    d.call("cancel", id=rec["id"])
    final = d.wait_job(rec["id"], timeout=30)
    elapsed = time.monotonic() - t0
    assert final["status"] == "cancelled"
    assert elapsed >= 2 * d.config["supervisor"]["interrupt_grace_seconds"], "SIGKILL came before the grace periods"
    assert_no_leftovers(d, {rec["id"]}, {pid})
    assert d.call("hello")["pid"] == d.proc.pid


def test_stubborn_child_does_not_hold_up_shutdown(make_daemon):
    d = make_daemon()
    rec = d.delegate("stubborn", background=True, script=STUBBORN, resume=False)
    pid = running_job(d, rec["id"])["pid"]
    wait_for(lambda: _sleeps(d, 100), what="the stubborn command")
    assert d.stop() == 0
    assert_no_leftovers(d, {rec["id"]}, {pid}, timeout=5)
    d.start()
    assert d.call("job", id=rec["id"])["status"] == "interrupted"


def test_grandchildren_and_double_forked_grandchild_gone_after_cancel(any_daemon):
    d = any_daemon
    rec = d.delegate("forker", script=FORKER)
    pid = running_job(d, rec["id"])["pid"]
    wait_for(lambda: _sleeps(d, 301, 302, 303), what="three grandchildren")
    escaped = [p for p in d.children() if process_name(p) == "sleep" and os.getsid(p.pid) != pid]
    assert escaped, "the setsid grandchild should have left the child's session"
    d.call("cancel", id=rec["id"])
    assert d.wait_job(rec["id"])["status"] == "cancelled"
    assert_no_leftovers(d, {rec["id"]}, {pid} | {p.pid for p in escaped})


def test_grandchildren_gone_after_shutdown(make_daemon):
    d = make_daemon()
    recs = [d.delegate(f"forker {i}", background=True, script=FORKER) for i in range(2)]
    pids = {running_job(d, r["id"])["pid"] for r in recs}
    wait_for(lambda: len([p for p in d.children() if process_name(p) == "sleep"]) >= 6, what="six grandchildren")
    assert d.stop() == 0
    assert_no_leftovers(d, {r["id"] for r in recs}, pids, timeout=5)


def test_kill9_grandchildren_die_and_restart_sweeps_the_escaped_one(make_daemon):
    d = make_daemon()
    rec = d.delegate("forker", background=True, script=FORKER, resume=False)
    pid = running_job(d, rec["id"])["pid"]
    wait_for(lambda: _sleeps(d, 301, 302, 303), what="three grandchildren")
    d.kill9()
    # the child and its process group die with the daemon; the setsid grandchild
    # is out of reach of both until the next daemon sweeps it
    wait_for(lambda: not live(pid) and not titled({rec["id"]}) and not _sleeps(d, 301)
             and not _sleeps(d, 302), timeout=5, what="child and its group gone")
    d.start()
    assert_no_leftovers(d, {rec["id"]}, {pid})
    assert d.call("job", id=rec["id"])["status"] == "lost"


def test_flooding_the_tool_output_is_capped(make_daemon):
    d = make_daemon({"limits": {"max_output_bytes": 4096}})
    script = [{"text": "flood", "tool_calls": [{"name": "terminal", "input": {
        "command": "yes 'flood flood flood' | head -c 60000000; echo end"}}]}, {"text": "survived"}]
    rec = d.delegate("flood the tool", script=script)
    final = d.wait_job(rec["id"], timeout=120)
    assert final["status"] == "completed" and final["summary"] == "survived"
    assert final["trace"][0]["bytes"] <= 8192
    assert_no_leftovers(d, {rec["id"]})


def test_flooding_the_log_keeps_the_daemon_responsive(make_daemon):
    # the log cap (tests/test_logcap.py) is not what this measures: with it, the child's last line
    # can land in a rotated copy, so the cap is set above what the flood writes
    d = make_daemon({"logs": {"max_bytes": 1 << 30}})
    # writes straight into the child's own stdout, the job's log file, until stopped
    script = [{"text": "flood", "tool_calls": [{"name": "terminal", "input": {
        "command": "yes 'log flood' >> /proc/$PPID/fd/1", "timeout": 300}}]}, {"text": "never"}]
    rec = d.delegate("flood the log", script=script)
    log = d.home / "jobs" / rec["id"] / "log"
    wait_for(lambda: log.exists() and log.stat().st_size > 20_000_000, timeout=60, what="20 MB of log")
    conn = d.conn(timeout=10)
    latencies = []
    for _ in range(20):
        t0 = time.monotonic()
        conn.call("status")
        latencies.append(time.monotonic() - t0)
    conn.close()
    assert sorted(latencies)[10] < 2.0, f"status slowed to {sorted(latencies)[10]:.2f}s while a child floods"
    d.call("cancel", id=rec["id"])
    assert d.wait_job(rec["id"])["status"] == "cancelled"
    tail = d.call("logs", id=rec["id"], offset=-1000)["data"]
    assert "log flood" in tail and "finished: interrupted" in tail
    assert_no_leftovers(d, {rec["id"]})

