"""A person steers a running delegation (``steer``) and reads its journal as it grows (``journal``);
a steer message reaches the model once although the daemon dies (``kill -9``, its child with it)
after the child fetched it, before or after the child journaled it."""

from __future__ import annotations

import json
import threading

import pytest

from hermesd.protocol import ProtocolError
from tests.chaos.helpers import forkserver
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, tool_use_block
from tests.harness import child_held_after, wait_for

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


def test_a_message_is_kept_until_the_child_acknowledges_it_journaled_it(daemon):
    steps = [{"tool_calls": [{"name": "terminal", "input": {"command": f"sleep {s}"}}]} for s in (3, 1, 1, 1)]
    job = daemon.delegate("four commands", script=[*steps, {"text": "done"}], toolsets=["terminal"],
                          background=True)["id"]
    wait_for(lambda: any(e["t"] == "tool_started" for e in _entries(daemon, job)), what="the first command")
    assert daemon.call("steer", id=job, message="first")["unread"] == 1

    def acknowledged() -> bool:  # journaled before a model call, acknowledged at the fetch before the next one
        kinds = [e["t"] for e in _entries(daemon, job)]
        return "note" in kinds and kinds[kinds.index("note"):].count("tool_started") >= 2

    wait_for(acknowledged, what="the message journaled, then another model call")
    assert daemon.call("steer", id=job, message="second")["unread"] == 1  # the first one is gone
    assert daemon.wait_job(job)["status"] == "completed"
    notes = [e["block"]["text"].split("\n")[-1] for e in _entries(daemon, job) if e["t"] == "note"]
    assert notes == ["first", "second"]


STEER = "look at the README first"


class Brain:
    """A command (``sleep 2``) in the first turn, then the final answer.  ``hold``: the first request
    that holds :data:`STEER` waits (``seen`` set) until ``release``."""

    def __init__(self, hold: bool = False):
        self.hold, self.seen, self.release = hold, threading.Event(), threading.Event()

    def __call__(self, request):
        sent = json.dumps(request.body["messages"])
        if self.hold and STEER in sent and not self.seen.is_set():
            self.seen.set()
            self.release.wait(60)
        if '"tool_result"' not in sent:
            return Message([tool_use_block("terminal", {"command": "sleep 2; echo slept"})], stop_reason="tool_use")
        return Message([text_block("went on")])


def _notes(d, job: str) -> list[dict]:
    return [e for e in _entries(d, job) if e["t"] == "note"]


def _steered_then_killed(make_daemon, api, env: dict[str, str], taken, journaled: int) -> tuple:
    """A background delegation steered while its command runs; once ``taken()`` (the child has
    the message, its journal ``journaled`` notes), hermesd is killed (``kill -9``) and started
    again; returns the job's final record and its journal's notes."""
    d = make_daemon(forkserver({"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal"]}),
                    {"ANTHROPIC_API_KEY": "test-key", **env})
    job = d.delegate("sleep then answer", background=True, toolsets=["terminal"])["id"]
    wait_for(lambda: any(e["t"] == "tool_started" for e in _entries(d, job)), 60, what="the tool call to start")
    assert d.call("steer", id=job, message=STEER)["unread"] == 1
    wait_for(taken, 60, what="the child to take the message")
    assert len(_notes(d, job)) == journaled
    d.kill9()
    api.default.release.set()
    d.start()
    return d.wait_job(job, timeout=90), _notes(d, job)


def _in_requests(api) -> list[int]:
    """How many times each model request's conversation holds :data:`STEER`."""
    return [json.dumps(r.body["messages"]).count(STEER) for r in api.requests]


def test_a_steer_taken_by_a_child_killed_before_it_journaled_it_reaches_the_model_once(make_daemon, tmp_path):
    # The child fetched the message (child.inbox) and died with hermesd before writing it to its journal:
    # it was gone with the daemon's memory; it waits in state.db until the child says it is journaled.
    hold = tmp_path / "hold"
    hold.mkdir()
    with FakeAnthropic() as api:
        api.default = Brain()
        final, notes = _steered_then_killed(make_daemon, api, child_held_after({}, hold, "child.inbox", "messages"),
                                            (hold / "held").exists, journaled=0)
        assert final["status"] == "completed" and final["resumes"] == 1, final
        assert _in_requests(api)[-1] == 1 and max(_in_requests(api)) == 1, _in_requests(api)
    assert len(notes) == 1 and STEER in notes[0]["block"]["text"] and notes[0]["steer"]


def test_a_steer_journaled_but_not_acknowledged_when_its_child_dies_is_not_given_twice(make_daemon):
    # The child journaled the message and died (with hermesd) in the model call that carries it, before its
    # next child.inbox acknowledged it: the resumed child replays it from its journal and only acknowledges
    # the copy the daemon answers again.
    with FakeAnthropic() as api:
        api.default = brain = Brain(hold=True)
        final, notes = _steered_then_killed(make_daemon, api, {}, brain.seen.is_set, journaled=1)
        assert final["status"] == "completed" and final["resumes"] == 1, final
        assert _in_requests(api)[-1] == 1 and max(_in_requests(api)) == 1, _in_requests(api)
    assert len(notes) == 1
