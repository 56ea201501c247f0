"""A person steers a running delegation (``steer``) and reads its journal as it grows (``journal``)."""

from __future__ import annotations

import pytest

from hermesd.protocol import ProtocolError
from tests.harness import wait_for

SLOW = [{"tool_calls": [{"name": "terminal", "input": {"command": "sleep 2; echo slept"}}]}, {"text": "went on"}]


def _entries(d, job: str) -> list[dict]:
    entries, offset = [], 0
    while True:
        page = d.call("journal", id=job, offset=offset)
        entries += page["entries"]
        if page["offset"] == offset:
            return entries
        offset = page["offset"]


def test_a_person_steers_a_running_delegation_and_its_journal_shows_it(daemon):
    job = daemon.delegate("sleep then answer", script=SLOW, toolsets=["terminal"])["id"]
    wait_for(lambda: any(e["t"] == "tool_started" for e in _entries(daemon, job)), what="the tool call to start")
    answer = daemon.call("steer", id=job, message="look at the README first")
    assert answer["id"] == job and answer["unread"] == 1
    assert daemon.wait_job(job)["status"] == "completed"
    entries = _entries(daemon, job)
    notes = [e["block"]["text"] for e in entries if e["t"] == "note"]
    assert notes and "[Message from a person, sent while you work]" in notes[0] and "README" in notes[0]
    assert [e["t"] for e in entries][:3] == ["message", "message", "tool_started"]
    with pytest.raises(ProtocolError) as ended:
        daemon.call("steer", id=job, message="too late")
    assert ended.value.code == "invalid_state"


def test_steer_refuses_what_it_cannot_reach(daemon):
    with pytest.raises(ProtocolError) as missing:
        daemon.call("steer", id="deleg_nope", message="hello")
    assert missing.value.code == "not_found"
    job = daemon.delegate("answer", script=[{"text": "done"}])["id"]
    with pytest.raises(ProtocolError) as empty:
        daemon.call("steer", id=job, message="  ")
    assert empty.value.code in ("bad_request", "invalid_state")
    assert daemon.call("journal", id=job, offset=10**9)["entries"] == []
