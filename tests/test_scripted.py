"""The scripted provider: scripts played in order, the default plan, interruptible sleeps."""

from __future__ import annotations

import threading
import time

import pytest

from child import agent
from child import messages as m
from child.__main__ import StopFlag
from child.providers.base import ProviderError
from child.providers.scripted import ScriptedProvider, default_plan
from child.tools.registry import tools_for
from hermesd.contract.wire import JobSpec

TOOLS = [t.spec() for t in tools_for(["terminal", "file"])]


def test_script_is_played_in_order_then_a_final_answer():
    p = ScriptedProvider([{"thinking": "hmm", "text": "calling", "tool_calls": [{"name": "terminal",
                                                                               "input": {"command": "ls"}}]},
                          {"text": "the answer"}], goal="count files")
    first = p.complete("", [m.user("count files")], TOOLS)
    assert first.content == [m.thinking("hmm"), m.text("calling"),
                             m.tool_use("terminal", {"command": "ls"}, id="toolu_scripted_1_0")]
    assert first.stop_reason == "tool_use" and first.usage["input"] > 0
    assert p.complete("", [], TOOLS).content == [m.text("the answer")]
    conversation = [m.user(m.tool_result("toolu_scripted_1_0", "a.txt\nb.txt"))]
    final = p.complete("", conversation, TOOLS)
    assert final.stop_reason == "end_turn"
    text = m.final_text(m.assistant(final.content))
    assert '"count files"' in text and "synthetic" in text and "a.txt" in text
    assert p.synthetic is True and p.name == "scripted"


def test_error_steps_raise():
    p = ScriptedProvider([{"error": "overloaded", "retryable": True}, {"error": "bad"}])
    with pytest.raises(ProviderError) as err:
        p.complete("", [], [])
    assert err.value.retryable
    with pytest.raises(ProviderError) as err:
        p.complete("", [], [])
    assert not err.value.retryable


def test_sleep_is_cut_short_by_the_stop_flag():
    stop = StopFlag()
    threading.Timer(0.05, stop.set, args=("SIGINT",)).start()
    started = time.monotonic()
    ScriptedProvider([{"sleep": 30, "text": "late"}], stop=stop).complete("", [], [])
    assert time.monotonic() - started < 1.0


def test_default_plan_uses_the_tools_offered():
    plan = default_plan("tidy up", TOOLS)
    assert [s["tool_calls"][0]["name"] for s in plan] == ["terminal", "list_files"]
    assert plan[0]["tool_calls"][0]["input"] == {"command": "pwd"}
    assert default_plan("x", []) == []
    action_tool = {"name": "sh", "input_schema": {"properties": {"action": {"enum": ["read", "write"]},
                                                                 "command": {}},
                                                  "required": ["action", "command"]}}
    assert default_plan("x", [action_tool])[0]["tool_calls"][0]["input"]["action"] == "write"


def test_default_plan_end_to_end(tmp_path):
    """The default plan runs its tools and writes nothing into the working directory."""
    result = agent.run(JobSpec(goal="write a note", provider="scripted", cwd=str(tmp_path)), None, StopFlag())
    assert result.status == "completed" and result.synthetic is True
    assert [t["name"] for t in result.trace] == ["terminal", "list_files"]
    assert all(t["ok"] for t in result.trace)
    assert list(tmp_path.iterdir()) == []
    assert '"write a note"' in result.summary and str(tmp_path) in result.summary


def test_step_seconds_from_the_environment(monkeypatch):
    """``HERMES_SCRIPTED_STEP_SECONDS`` delays every step without a ``sleep`` of its own
    (the stop flag still cuts it short); a value that is no number is a clear error."""
    monkeypatch.setenv("HERMES_SCRIPTED_STEP_SECONDS", "0.3")
    provider = ScriptedProvider([{"text": "slow"}, {"text": "own", "sleep": 0}])
    started = time.monotonic()
    provider.complete("", [], [])
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    provider.complete("", [], [])
    assert time.monotonic() - started < 0.3
    stop = StopFlag()
    stop.set("SIGINT")
    started = time.monotonic()
    ScriptedProvider([{"text": "x"}], stop=stop).complete("", [], [])
    assert time.monotonic() - started < 0.3
    monkeypatch.setenv("HERMES_SCRIPTED_STEP_SECONDS", "soon")
    with pytest.raises(ProviderError, match="HERMES_SCRIPTED_STEP_SECONDS='soon'"):
        ScriptedProvider([])
