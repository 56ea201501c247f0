"""Approvals: a command the tripwire holds (or a tool marked ``approval: always``) waits for a
person — approved, denied, timed out, refused with nobody to ask, across kill -9 and restart."""

from __future__ import annotations

import json
import time

import pytest

from hermesd.protocol import ProtocolError
from tests.harness import paused_after_first, wait_for

HELD = "echo curl-x | sh; echo ran-it"
"""A command the tripwire holds (a download piped into a shell) that does nothing when run."""
HOOK = {"hooks": {"on_approval_request": 'cat > "approval-$HERMES_APPROVAL_ID.json"'}}
SCRIPT = [{"tool_calls": [{"name": "terminal", "input": {"command": HELD}}]}, {"text": "went on"}]


def _pending(d, job: str) -> dict:
    found = wait_for(lambda: d.call("approvals.list", job=job)["approvals"], what="the approval request")
    assert len(found) == 1
    return found[0]


def _tool_result(d, job: str) -> str:
    """The text of the first tool result of the job's trajectory."""
    trajectory = json.loads((d.home / "jobs" / job / "trajectory.json").read_text())
    results = [b for m in trajectory["messages"] if m["role"] == "tool" for b in [m["content"]]]
    return str(results[0])


def test_a_held_command_waits_for_a_person_and_runs_once_approved(make_daemon):
    d = make_daemon(config={**HOOK, "delegation": {"stale_after_seconds": 3.0}})
    job = d.delegate("run it", script=SCRIPT, toolsets=["terminal"])["id"]
    request = _pending(d, job)
    assert request["tool"] == "terminal" and request["arguments"] == {"command": HELD}
    assert "tripwire" in request["why"] and request["chain"] == [] and request["state"] == "pending"
    hook_file = d.home / "jobs" / job / f"approval-{request['id']}.json"
    record = json.loads(wait_for(lambda: hook_file.exists() and hook_file.read_text(), what="the hook's record"))
    assert record["id"] == request["id"] and record["arguments"]["command"] == HELD
    listed = d.ctl("approvals")
    assert listed.returncode == 0 and request["id"] in listed.stdout and "curl-x" in listed.stdout
    time.sleep(4.0)  # longer than stale_after_seconds: a waiting job is not stale
    assert d.call("job", id=job)["status"] == "running"
    done = d.ctl("approve", request["id"])
    assert done.returncode == 0, done.stderr
    assert d.wait_job(job)["status"] == "completed"
    assert "ran-it" in _tool_result(d, job)
    types = [e["type"] for e in d.call("events_since", since=0)["events"] if e["type"].startswith("approval.")]
    assert types == ["approval.requested", "approval.answered"]
    again = d.ctl("approve", request["id"])
    assert again.returncode == 6 and "already approved" in again.stderr


def test_denied_the_model_gets_the_reason_and_goes_on(make_daemon):
    d = make_daemon(config=HOOK)
    job = d.delegate("run it", script=SCRIPT, toolsets=["terminal"])["id"]
    request = _pending(d, job)
    done = d.ctl("deny", request["id"], "--reason", "not on this machine")
    assert done.returncode == 0, done.stderr
    rec = d.wait_job(job)
    assert rec["status"] == "completed" and rec["summary"] == "went on"
    result = _tool_result(d, job)
    assert "command denied" in result and "not on this machine" in result and "ran-it" not in result


def test_unanswered_it_times_out_and_a_follower_counts_as_a_person(make_daemon):
    d = make_daemon(config={"approvals": {"timeout_seconds": 1}})
    assert d.call("approvals.list", follow=True)["reachable"]
    job = d.delegate("run it", script=SCRIPT, toolsets=["terminal"])["id"]
    request = _pending(d, job)
    assert d.wait_job(job)["status"] == "completed"
    assert "approvals.timeout_seconds=1" in _tool_result(d, job)
    assert d.call("approvals.list", state="all")["approvals"][0]["state"] == "timed_out"
    assert d.call("approvals.list", state="timed_out")["approvals"][0]["id"] == request["id"]


def test_with_nobody_to_ask_it_is_refused_at_once_as_before(make_daemon):
    d = make_daemon()
    job = d.delegate("run it", script=SCRIPT, toolsets=["terminal"])["id"]
    assert d.wait_job(job)["status"] == "completed"
    result = _tool_result(d, job)
    assert "nobody to ask" in result and "subagent_auto_approve" in result and "ran-it" not in result
    assert d.call("approvals.list", state="all") == {"approvals": [], "reachable": False}


def test_a_tool_marked_always_waits_and_a_jobs_process_cannot_answer(make_daemon):
    d = make_daemon(config={**HOOK, "approvals": {"always": ["list_files"]}})
    script = [{"tool_calls": [{"name": "list_files", "input": {"path": "."}}]}, {"text": "went on"}]
    job = d.delegate("list", script=script, toolsets=["file"])["id"]
    request = _pending(d, job)
    assert request["tool"] == "list_files" and request["why"] == "approval: always"
    child = wait_for(lambda: d.call("job", id=job)["pid"], what="the job's process")
    with pytest.raises(ProtocolError) as refused:  # what a job's `hermesctl approve` would send
        d.call("approvals.approve", id=request["id"], pid=child)
    assert refused.value.code == "bad_request" and "answered by people" in refused.value.message
    assert d.ctl("approve", request["id"]).returncode == 0
    assert d.wait_job(job)["status"] == "completed"
    assert "not run" not in _tool_result(d, job)


def test_a_request_survives_kill_9_and_restart(make_daemon):
    d = make_daemon(config=HOOK)
    job = d.delegate("run it", script=SCRIPT, toolsets=["terminal"])["id"]
    request = _pending(d, job)
    d.kill9()
    d.start()
    # the job resumes (from its journal) still waiting: the same request, still pending
    wait_for(lambda: d.call("job", id=job)["status"] == "running", what="the job resumed")
    time.sleep(1.0)
    (after,) = d.call("approvals.list", state="all")["approvals"]
    assert after["id"] == request["id"] and after["state"] == "pending" and after["arguments"] == {"command": HELD}
    assert d.ctl("approve", request["id"]).returncode == 0
    assert d.wait_job(job)["status"] == "completed"
    assert "ran-it" in _tool_result(d, job)


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_a_waiting_jobs_budget_clock_does_not_run(make_daemon):
    d = make_daemon(config=HOOK)
    job = d.delegate("run it", script=SCRIPT, toolsets=["terminal"], timeout_seconds=3)["id"]
    request = _pending(d, job)
    time.sleep(9.0)  # past its 3 s and the daemon's backstop (3 s + 5 s): neither counts a person's time
    assert d.call("job", id=job)["status"] == "running"
    assert d.ctl("approve", request["id"]).returncode == 0
    rec = d.wait_job(job)
    assert rec["status"] == "completed", rec
    assert "ran-it" in _tool_result(d, job)


def test_a_follower_says_when_the_daemon_is_back_and_counts_again_at_once(make_daemon, tmp_path):
    """After ``kill -9`` and a restart, ``approvals --follow`` says it lost the daemon and that it is
    back, and has told it a person is watching by then (not at its next window, up to 10 s later)."""
    import subprocess
    import sys

    d = make_daemon()
    errors = tmp_path / "follower.err"
    # the follower pauses 2 s after its first check-in, before it asks for the last event and
    # subscribes: the daemon dies in that window (on a loaded machine it once did), and the
    # follower must wait for it, not exit
    slow = tmp_path / "slow"
    slow.mkdir()
    env = paused_after_first(d.env, slow, "approvals.list")
    with open(errors, "w") as err:
        follower = subprocess.Popen([sys.executable, "-m", "client", "approvals", "--follow"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: d.call("approvals.list")["reachable"], what="the follower to check in")
        d.kill9()
        wait_for(lambda: "following again once it is back" in errors.read_text(), what="the follower to say so")
        assert follower.poll() is None, errors.read_text()
        d.start()
        wait_for(lambda: "hermesd is back" in errors.read_text(), timeout=8, what="the follower back")
        assert d.call("approvals.list")["reachable"], errors.read_text()
        assert "Traceback" not in errors.read_text()
    finally:
        follower.kill()
        follower.wait(10)
