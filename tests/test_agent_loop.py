"""The agent loop end to end, in-process: scripted provider (and the fake Messages API), real tools."""

from __future__ import annotations

import json
import threading
import time

import pytest

import child.agent as agent
from child import messages as m
from child.__main__ import StopFlag
from child.providers.base import Completion
from hermesd.contract.wire import JobSpec
from tests.fakes import scrub_env
from tests.fakes.anthropic_server import FakeAnthropic, text_block


class Channel:
    """Records ``child.progress`` notifications; ``on_notify`` runs on each one."""

    def __init__(self, on_notify=None):
        self.notes: list[dict] = []
        self.on_notify = on_notify

    def notify(self, op, **args):
        self.notes.append({"op": op, **args})
        if self.on_notify:
            self.on_notify(args)


class WatchedEvent(threading.Event):
    """An Event that says when somebody starts a long wait on it (a scripted sleep)."""

    def __init__(self):
        super().__init__()
        self.sleeping = threading.Event()

    def wait(self, timeout=None):
        if timeout is None or timeout > 1:
            self.sleeping.set()
        return super().wait(timeout)


def call(name, **args):
    return {"name": name, "input": args}


def run(tmp_path, script=None, channel=None, stop=None, history=None, **spec):
    """The agent on ``spec``; with ``history``, as a session turn (its part of the spec)."""
    spec = {"job": "deleg_test", "goal": "say hi", "toolsets": ["terminal", "file"], "provider": "scripted",
            "script": script, "cwd": str(tmp_path), **spec}
    entry = agent.run if history is None else agent.run_turn
    if history is not None:
        spec["part"] = {"history": history}
    return entry(JobSpec.from_wire(spec), channel if channel is not None else Channel(), stop or StopFlag())


def assert_well_formed(messages):
    """Every tool_use is answered by a tool_result in the next message."""
    for i, message in enumerate(messages):
        ids = [b["id"] for b in m.tool_uses(message)]
        if ids:
            answered = [b["tool_use_id"] for b in m.blocks_of(messages[i + 1], "tool_result")]
            assert answered == ids


@pytest.fixture(autouse=True)
def no_retry_waits(monkeypatch):
    scrub_env(monkeypatch)
    monkeypatch.setattr(agent, "RETRY_DELAYS", (0.0, 0.0, 0.0))


def test_completed_run_with_a_tool_call(tmp_path):
    channel = Channel()
    result = run(tmp_path, [{"thinking": "plan", "tool_calls": [call("terminal", command="echo hi")]},
                            {"text": "all done"}], channel, context="be quick")
    assert (result.status, result.exit_reason, result.error) == ("completed", "completed", None)
    assert result.summary == "all done"
    assert result.api_calls == 2 and result.tokens["input"] > 0 and result.tokens["output"] > 0
    assert result.trace == [{"name": "terminal", "ok": True, "bytes": result.trace[0]["bytes"],
                             "seconds": result.trace[0]["seconds"]}] and result.trace[0]["seconds"] >= 0
    assert (result.synthetic, result.provider, result.model) == (True, "scripted", "scripted")
    assert result.duration_seconds > 0 and result.trajectory is None
    msgs = result.messages
    assert [x["role"] for x in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0] == m.user("say hi\n\nContext:\nbe quick")
    assert "hi" in msgs[2]["content"][0]["content"] and not msgs[2]["content"][0]["is_error"]
    assert [(n["op"], n["turn"], n["tool"], n["api_calls"], n.get("activity")) for n in channel.notes] == [
        ("child.progress", 1, None, 0, "waiting for the model's first reply"), ("child.progress", 1, None, 1, None),
        ("child.progress", 1, None, 1, "in tool terminal running `echo hi`"), ("child.progress", 1, "terminal", 1, None),
        ("child.progress", 2, None, 1, "waiting for the model's reply in turn 2"), ("child.progress", 2, None, 2, None)]
    assert channel.notes[-1]["tokens"] == result.tokens


def test_system_prompt_lists_the_tools(tmp_path):
    seen = {}

    class Recorder:
        name, model, synthetic = "rec", "rec-1", False

        def complete(self, system, messages, tools, **kw):
            seen.update(system=system, tools=tools, kw=kw)
            return Completion([m.text("ok")])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agent, "make_provider", lambda spec, stop=None: Recorder())
        result = run(tmp_path, toolsets=["terminal"], reasoning_effort="high", system_prompt="Be a cat.")
    assert result.status == "completed" and result.provider == "rec" and not result.synthetic
    assert seen["system"].startswith("Be a cat.") and "- terminal: Run a shell command" in seen["system"]
    assert str(tmp_path) in seen["system"]
    assert [t["name"] for t in seen["tools"]] == ["terminal"]
    assert seen["kw"] == {"max_tokens": 4096, "reasoning_effort": "high"}


def test_unknown_tool_gets_an_error_result_and_the_loop_goes_on(tmp_path):
    result = run(tmp_path, [{"tool_calls": [call("no_such_tool", x=1)]},
                            {"tool_calls": [call("terminal", command="echo x")]},  # not in ["file"]
                            {"tool_calls": [{"name": "write_file", "input": {m.INVALID_JSON: "{oops"}}]},
                            {"text": "recovered"}], toolsets=["file"])
    assert result.status == "completed" and result.summary == "recovered"
    assert [t["ok"] for t in result.trace] == [False, False, False]
    errors = [x["content"][0] for x in result.messages[2:7:2]]
    assert all(e["is_error"] for e in errors)
    assert "unknown tool" in errors[0]["content"]
    assert "terminal" in errors[1]["content"] and "not available" in errors[1]["content"]
    assert "not a JSON object" in errors[2]["content"] and "{oops" in errors[2]["content"]


def test_max_turns_fails_with_the_partial_output(tmp_path):
    steps = [{"text": f"step {i}", "tool_calls": [call("terminal", command=f"echo {i}")]} for i in range(5)]
    result = run(tmp_path, steps, max_turns=2)
    assert (result.status, result.exit_reason) == ("failed", "max_turns")
    assert "max_turns=2" in result.error
    assert result.summary == "step 0\n\nstep 1"
    assert result.api_calls == 2 and len(result.trace) == 2
    assert_well_formed(result.messages)


def test_stop_flag_ends_a_sleeping_step_within_a_second(tmp_path):
    stop = StopFlag()
    stop.event = WatchedEvent()
    box = {}
    worker = threading.Thread(target=lambda: box.update(result=run(
        tmp_path, [{"text": "first", "tool_calls": [call("terminal", command="true")]},
                   {"sleep": 60, "text": "never"}], stop=stop)))
    worker.start()
    assert stop.event.sleeping.wait(10)
    started = time.monotonic()
    stop.set("SIGINT")
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - started < 1.0
    result = box["result"]
    assert (result.status, result.exit_reason) == ("interrupted", "interrupted")
    assert "SIGINT" in result.error and result.summary == "first"
    assert_well_formed(result.messages)


def test_stop_ends_a_model_call_that_ignores_it(tmp_path):
    entered, release = threading.Event(), threading.Event()

    class Stuck:
        name, model, synthetic = "stuck", "stuck", False

        def complete(self, *args, **kw):
            entered.set()
            release.wait(30)
            return Completion([m.text("too late")])

    stop = StopFlag()
    threading.Thread(target=lambda: (entered.wait(10), stop.set("SIGTERM")), daemon=True).start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(agent, "make_provider", lambda spec, stop=None: Stuck())
            result = run(tmp_path, stop=stop)
    finally:
        release.set()
    assert result.status == "interrupted" and "SIGTERM" in result.error
    assert result.api_calls == 0 and [x["role"] for x in result.messages] == ["user"]


def test_stop_between_tool_calls_answers_the_rest(tmp_path):
    stop = StopFlag()
    channel = Channel(on_notify=lambda note: note["tool"] and stop.set("SIGINT"))
    result = run(tmp_path, [{"tool_calls": [call("terminal", command="echo 1"), call("terminal", command="echo 2")]},
                            {"text": "never"}], channel, stop)
    assert result.status == "interrupted" and len(result.trace) == 1
    second = result.messages[2]["content"][1]
    assert second["is_error"] and "not run" in second["content"]
    assert_well_formed(result.messages)


def test_wall_clock_timeout(tmp_path):
    started = time.monotonic()
    result = run(tmp_path, [{"sleep": 60, "text": "never"}], timeout_seconds=0.2)
    assert (result.status, result.exit_reason) == ("timed_out", "timeout")
    assert result.error == "timed out after 0.2 s waiting for the model's first reply (0 model calls completed)"
    assert time.monotonic() - started < 2


def test_timeout_in_a_tool_names_the_tool_and_its_command(tmp_path):
    notes = []
    result = run(tmp_path, [{"tool_calls": [call("terminal", command="sleep 30")]}, {"text": "never"}],
                 Channel(on_notify=notes.append), timeout_seconds=0.5)
    assert result.status == "timed_out"
    assert result.error == "timed out after 0.5 s in tool terminal running `sleep 30` (1 model call completed)"
    activities = [n["activity"] for n in notes if n.get("activity")]
    assert activities == ["waiting for the model's first reply", "in tool terminal running `sleep 30`"]
    assert all(n["provider"] == "scripted" for n in notes if n.get("activity"))


def test_retryable_provider_errors_are_retried(tmp_path):
    result = run(tmp_path, [{"error": "stream broke", "retryable": True}, {"text": "ok"}])
    assert result.status == "completed" and result.summary == "ok" and result.api_calls == 1


@pytest.mark.parametrize("script, calls", [
    ([{"error": "bad request"}], 1),
    ([{"error": "overloaded", "retryable": True}] * 4, 4),
])
def test_provider_errors_fail_the_run(tmp_path, script, calls):
    result = run(tmp_path, script + [{"text": "never"}])
    assert (result.status, result.exit_reason) == ("failed", "error")
    assert result.error == script[0]["error"] and result.api_calls == 0


def test_setup_errors_are_reported(tmp_path):
    result = run(tmp_path, provider="nope")
    assert (result.status, result.exit_reason) == ("failed", "error") and "unknown provider" in result.error
    result = run(tmp_path, toolsets=["bogus"])
    assert result.status == "failed" and "bogus" in result.error


def test_trajectory_is_recorded(tmp_path):
    result = run(tmp_path, [{"thinking": "I will echo.", "tool_calls": [call("terminal", command="echo hi")]},
                            {"text": "done"}], record_trajectory=True, toolsets=["terminal"])
    trajectory = result.trajectory
    assert [t["from"] for t in trajectory["conversations"]] == ["system", "human", "gpt", "tool", "gpt"]
    assert "<think>" in trajectory["conversations"][2]["value"]
    assert trajectory["has_reasoning"] is True
    assert trajectory["tool_names"] == ["terminal"] and trajectory["tools_offered"] == ["terminal"]
    assert trajectory["tool_stats"]["terminal"] == {"count": 1, "success": 1, "failure": 0}


@pytest.fixture
def api():
    with FakeAnthropic() as server:
        yield server


def test_anthropic_session_turn_with_a_tool(tmp_path, api):
    api.reply_tool_use("terminal", {"command": "echo from-tool"}, thinking="Let me run it.")
    api.reply_text("it printed from-tool")
    history = [m.user("hello"), m.assistant([m.text("hi there")])]
    result = run(tmp_path, provider="anthropic", base_url=api.url, model="claude-test", history=history,
                 goal="run echo", toolsets=["terminal"])
    assert result.status == "completed" and result.summary == "it printed from-tool"
    assert (result.provider, result.model, result.synthetic) == ("anthropic", "claude-test", False)
    assert len(result.messages) == 4  # only this turn's messages
    sent = api.requests[1].body["messages"]
    sent[2]["content"][0].pop("cache_control")  # the fallback breakpoint (tests/test_prompt_cache.py)
    assert sent[:3] == [m.user("hello"), m.assistant([m.text("hi there")]), m.user("run echo")]
    assert sent[3]["content"][0]["signature"] == "fake-signature"
    assert "from-tool" in sent[4]["content"][0]["content"]


def test_loop_retries_a_midstream_overloaded_error(tmp_path, api):
    api.reply_stream_error("overloaded_error", content=[text_block("par")]).reply_text("recovered")
    result = run(tmp_path, provider="anthropic", base_url=api.url)
    assert result.status == "completed" and result.summary == "recovered"
    assert len(api.requests) == 2 and result.api_calls == 1


class InboxChannel(Channel):
    """A channel whose daemon has one steering message waiting."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def call(self, op, timeout=None, **args):
        self.calls.append(op)
        return {"messages": ["look at the README first"] if op == "child.inbox" else []}


def test_only_a_child_an_agent_or_a_person_can_steer_asks_for_steering(tmp_path):
    script = [{"tool_calls": [call("terminal", command="true")]}, {"text": "done"}]
    for kind in ("session_turn", "batch_item"):
        nobody = InboxChannel()
        assert run(tmp_path, script, nobody, kind=kind).status == "completed"
        assert nobody.calls == []  # depth 0 and not a delegation: nobody can steer it, so it does not ask
    person = InboxChannel()
    result = run(tmp_path, script, person, kind="background")
    assert person.calls == ["child.inbox", "child.inbox"]  # a person may steer a delegation (steer)
    assert "[Message from the agent that started you" in json.dumps(result.messages)  # no sender: an agent's
    agents = InboxChannel()
    result = run(tmp_path, script, agents, depth=1)
    assert agents.calls == ["child.inbox", "child.inbox"]  # before each model call
    assert "look at the README first" in json.dumps(result.messages)
