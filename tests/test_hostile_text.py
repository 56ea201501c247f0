"""Text that exec and terminals refuse (a NUL byte, control characters) and
oversized fields: each is run or refused cleanly, and never leaves a job stuck
or a cap slot taken."""

from __future__ import annotations

import json

import pytest

from hermesd.protocol import ProtocolError
from tests.harness import wait_for
from tests.test_batch_daemon import finish, start

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)


def _caps_free(daemon) -> bool:
    caps = daemon.call("status")["caps"]
    return all(c["used"] == 0 for c in caps.values())


def test_a_nul_byte_in_a_goal_runs_and_frees_its_slots(daemon):
    job = daemon.wait_job(daemon.delegate("hello\x00world", background=True, script=[{"text": "ok"}])["id"])
    assert job["status"] == "completed" and job["goal"] == "hello\x00world"
    wait_for(lambda: _caps_free(daemon), timeout=10, what="every cap slot free")
    out = daemon.ctl("ps", "--all")
    assert "\x00" not in out.stdout and "hello\\x00world" in out.stdout  # escaped, as events and result show it


def test_a_nul_byte_in_a_session_message_and_a_batch_prompt(daemon, tmp_path):
    turn = daemon.call("session.send", session="s1", text="hi\x00there")["turn"]["id"]
    assert daemon.wait_job(turn)["status"] == "completed"
    dataset = tmp_path / "nul.jsonl"
    dataset.write_text(json.dumps({"prompt": "with NUL \x00 inside", "script": [{"thinking": "checking the prompt first", "text": "ok"}]})
                       + "\n")
    final = finish(daemon, start(daemon, dataset, "nul", num_workers=1), timeout=60)
    assert final["status"] == "completed" and final["progress"]["done"] == 1
    wait_for(lambda: _caps_free(daemon), timeout=10, what="every cap slot free")


def test_bad_cwd_and_oversized_context_are_refused_by_name(daemon):
    with pytest.raises(ProtocolError) as info:
        daemon.call("delegate", goal="g", cwd="/tmp/\x00x")
    assert info.value.code == "bad_request" and info.value.details["field"] == "cwd"
    with pytest.raises(ProtocolError) as info:
        daemon.delegate("g", context="c" * (256 * 1024 + 1))
    assert info.value.code == "too_large" and info.value.details["field"] == "context"
    assert _caps_free(daemon) and daemon.call("ps")["jobs"] == []


def test_lists_of_large_jobs_are_cut_to_fit_a_frame_and_events_page(daemon):
    context = "c" * (250 * 1024)
    ids = [daemon.wait_job(daemon.delegate(f"big {i}", context=context, script=[{"text": "ok"}])["id"])["id"]
           for i in range(40)]  # 40 records of 250 KiB: more than a reply carries
    answer = daemon.call("ps", all=True)
    assert answer["more"] is True and 0 < len(answer["jobs"]) < 40
    assert [j["id"] for j in answer["jobs"]] == ids[:len(answer["jobs"])]
    page = daemon.call("events_since", since=0)
    assert page["more"] is True and page["events"][-1]["seq"] < page["last_seq"]
    out = daemon.ctl("events", "--since", "0", "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    seqs = [json.loads(line)["seq"] for line in out.stdout.splitlines()]
    assert seqs == sorted(set(seqs)) and seqs[-1] == page["last_seq"]  # every event, once, in order
    rest = daemon.call("ps", all=True, cursor=answer["next"])
    assert [j["id"] for j in rest["jobs"]] == ids[len(answer["jobs"]):len(answer["jobs"]) + len(rest["jobs"])]
    listed = daemon.ctl("ps", "--all", "--json")  # page after page: every job, newest first
    assert listed.returncode == 0 and [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ids[::-1]
