"""The agent runtime inside real child processes, driven through the daemon."""

from __future__ import annotations

import pytest
import json
import signal
import time

import psutil

from tests.harness import wait_for, command_line, process_name

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

LONG_TOOL = [{"text": "about to run a long command",
              "tool_calls": [{"name": "terminal", "input": {"command": "echo started; sleep 100", "timeout": 300}}]},
             {"text": "never reached"}]


def _child_of(daemon, job_id):
    return next((p for p in daemon.children() if p.environ().get("HERMES_JOB_ID") == job_id
                 and "child" in command_line(p)), None)


def test_child_interrupted_mid_tool_reports_within_two_seconds(daemon):
    rec = daemon.delegate("interrupt me", script=LONG_TOOL)
    wait_for(lambda: any(process_name(p) == "sleep" for p in daemon.children()), what="the long command")
    child = _child_of(daemon, rec["id"])
    t0 = time.monotonic()
    child.send_signal(signal.SIGINT)
    final = daemon.wait_job(rec["id"], timeout=10)
    elapsed = time.monotonic() - t0
    assert final["status"] == "interrupted"
    assert final["exit_reason"] == "interrupted"
    assert "about to run a long command" in final["summary"]
    assert elapsed < 2.0, f"took {elapsed:.2f}s"
    wait_for(lambda: daemon.children() == [], timeout=10, what="the command's process group gone")


def test_runaway_command_killed_at_its_timeout_with_its_group(daemon):
    script = [{"tool_calls": [{"name": "terminal",
                               "input": {"command": "sleep 100 & sleep 100 & echo spawned; wait", "timeout": 1}}]},
              {"text": "gave up on the runaway command"}]
    rec = daemon.delegate("runaway", script=script)
    final = daemon.wait_job(rec["id"])
    assert final["status"] == "completed"
    assert final["trace"][0]["name"] == "terminal" and final["trace"][0]["ok"] is False
    assert not [p for p in daemon.children() if process_name(p) == "sleep"]


def test_child_timeout_ends_timed_out(make_daemon):
    d = make_daemon({"delegation": {"child_timeout_seconds": 1}})
    rec = d.delegate("too slow", script=[{"text": "thinking hard", "sleep": 60}])
    final = d.wait_job(rec["id"], timeout=30)
    assert final["status"] == "timed_out" and final["exit_reason"] == "timeout"
    # under load the clock may run out while the child still starts (loads its tools and provider)
    assert final["error"] in ("timed out after 1 s waiting for the model's first reply (0 model calls completed)",
                              "timed out after 1 s starting (0 model calls completed)")


def test_hung_child_timed_out_by_the_daemon_says_what_it_was_doing(make_daemon):
    """A child that cannot keep its own clock (stopped, as if stuck in native code) is ended
    by the daemon's backstop, and the error still says what it was waiting for."""
    d = make_daemon({"delegation": {"child_timeout_seconds": 5}})  # room for a slow start under load
    command = "kill -STOP $PPID; sleep 100"
    rec = d.delegate("hang", script=[{"tool_calls": [{"name": "terminal", "input": {"command": command}}]}])
    final = d.wait_job(rec["id"], timeout=60)
    assert final["status"] == "timed_out"
    assert final["error"] == f"timed out after 5 s in tool terminal running `{command}` (1 model call completed)"


def test_child_killed_by_a_signal_names_it_and_what_it_was_doing(daemon):
    command = "sleep 1; kill -SEGV $PPID; sleep 5"  # the progress report leaves first (zmq sends in a thread)
    rec = daemon.delegate("crash", script=[{"tool_calls": [{"name": "terminal", "input": {"command": command}}]}])
    final = daemon.wait_job(rec["id"], timeout=60)
    assert final["status"] == "failed"
    assert final["error"].startswith("child process killed by SIGSEGV (exit status -11) while in tool terminal "
                                     f"running `{command}` (1 model call completed) before reporting a result")
    assert "status -11 before" not in final["error"]
    assert "child/agent.py\", line" in final["error"]  # faulthandler's Python stack, in the log tail


def test_result_trajectory_is_sharegpt(daemon):
    script = [{"thinking": "I should look around", "text": "checking",
               "tool_calls": [{"name": "terminal", "input": {"command": "echo hi"}}]},
              {"thinking": "done", "text": "all good"}]
    rec = daemon.delegate("trajectory please", script=script)
    assert daemon.wait_job(rec["id"])["status"] == "completed"
    out = daemon.ctl("result", rec["id"], "--trajectory", "--json")
    assert out.returncode == 0, out.stderr
    traj = json.loads(out.stdout)["trajectory"]
    roles = [t["from"] for t in traj["conversations"]]
    assert roles[:2] == ["system", "human"] and "gpt" in roles and "tool" in roles
    gpt = [t["value"] for t in traj["conversations"] if t["from"] == "gpt"]
    assert "<think>" in gpt[0] and "<tool_call>" in gpt[0]
    assert traj["has_reasoning"] is True


def test_dangerous_command_denied_in_children(daemon):
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "rm -rf /"}}]}, {"text": "refused"}]
    rec = daemon.delegate("be dangerous", script=script)
    final = daemon.wait_job(rec["id"])
    assert final["trace"][0]["ok"] is False


def test_child_process_title_and_environment(daemon):
    rec = daemon.delegate("title check goal", script=[{"text": "x", "sleep": 30}])
    child = wait_for(lambda: _child_of(daemon, rec["id"]), what="child")
    wait_for(lambda: command_line(child).startswith("hermes-child"), what="process title")
    assert command_line(child).startswith(f"hermes-child {rec['id']}")
    env = child.environ()
    assert "NOTIFY_SOCKET" not in env and env["HERMES_JOB_ID"] == rec["id"]
    assert child.pid == psutil.Process(child.pid).pid and child.ppid() == daemon.proc.pid
    import os

    assert os.getpgid(child.pid) == child.pid and os.getsid(child.pid) == child.pid
    daemon.call("cancel", id=rec["id"])
    daemon.wait_job(rec["id"])
