"""ShareGPT conversion of a run's messages and the counts the batch job keeps."""

from __future__ import annotations

import json
import re

from child import messages as m
from child.tools.registry import known_tool_names, tools_for
from child.trajectory import (has_reasoning, to_messages, to_sharegpt, tool_calls_in, tool_schemas, tool_stats)

TOOLS = [t.spec() for t in tools_for(["terminal", "file"])]

RUN = [
    m.user("List the Python files, then read setup.py."),
    m.assistant([m.thinking("I should list files first.", "sig"), m.text("Let me look."),
                 m.tool_use("list_files", {"glob": "*.py"}, id="toolu_1"),
                 m.tool_use("terminal", {"command": "wc -l setup.py"}, id="toolu_2")]),
    m.user(m.tool_result("toolu_1", "setup.py\npkg/a.py"), m.tool_result("toolu_2", "denied", is_error=True)),
    m.assistant([m.tool_use("read_file", {"path": "setup.py"}, id="toolu_3")]),
    m.user(m.tool_result("toolu_3", 'print("héllo")\n')),
    m.assistant([m.text("Two files; setup.py prints a greeting.")]),
]


def parse_tagged(value: str, tag: str) -> list[dict]:
    return [json.loads(body) for body in re.findall(rf"<{tag}>\n(.*?)\n</{tag}>", value, re.S)]


def test_turn_sequence_and_values():
    turns = to_sharegpt("You are a careful agent.", RUN, TOOLS)
    assert [t["from"] for t in turns] == ["system", "human", "gpt", "tool", "gpt", "tool", "gpt"]
    assert turns[1]["value"] == "List the Python files, then read setup.py."
    assert turns[2]["value"] == (
        "<think>\nI should list files first.\n</think>\nLet me look.\n"
        '<tool_call>\n{"name": "list_files", "arguments": {"glob": "*.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "terminal", "arguments": {"command": "wc -l setup.py"}}\n</tool_call>')
    assert turns[3]["value"] == (
        '<tool_response>\n{"tool_call_id": "toolu_1", "name": "list_files", "content": "setup.py\\npkg/a.py"}\n'
        '</tool_response>\n'
        '<tool_response>\n{"tool_call_id": "toolu_2", "name": "terminal", "content": "denied"}\n</tool_response>')
    assert turns[4]["value"] == ('<think>\n</think>\n<tool_call>\n{"name": "read_file", "arguments": {"path": '
                                 '"setup.py"}}\n</tool_call>')
    assert turns[-1] == {"from": "gpt", "value": "<think>\n</think>\nTwo files; setup.py prints a greeting."}


def test_every_gpt_turn_starts_with_think_and_scratchpads_become_think():
    msgs = [m.user("q"), m.assistant([m.text("<REASONING_SCRATCHPAD>plan</REASONING_SCRATCHPAD>\nanswer")]),
            m.user("again"), m.assistant([m.text("  plain  ")])]
    gpt = [t["value"] for t in to_sharegpt("", msgs, []) if t["from"] == "gpt"]
    assert gpt == ["<think>plan</think>\nanswer", "<think>\n</think>\n  plain"]  # Hermes strips only the ends


def test_json_tool_results_are_embedded_as_json():
    msgs = [m.user("q"), m.assistant([m.tool_use("web_search", {"query": "x"}, id="t1"),
                                      m.tool_use("terminal", {"command": "ls"}, id="t2"),
                                      m.tool_use("terminal", {"command": "echo {"}, id="t3")]),
            m.user(m.tool_result("t1", '[{"title": "A"}]'), m.tool_result("t2", '{"ok": true}'),
                   m.tool_result("t3", "{ not json"))]
    tool = next(t["value"] for t in to_sharegpt("", msgs, []) if t["from"] == "tool")
    assert '"content": [{"title": "A"}]' in tool and '"content": {"ok": true}' in tool
    assert [r["content"] for r in parse_tagged(tool, "tool_response")] == [[{"title": "A"}], {"ok": True}, "{ not json"]


def test_system_turn_lists_every_tool_with_its_schema():
    system = to_sharegpt("You are a careful agent.", RUN, TOOLS)[0]["value"]
    listed = json.loads(re.search(r"<tools>\n(.*)\n</tools>", system, re.S).group(1))
    assert listed == [{"name": t["name"], "description": t["description"], "parameters": t["input_schema"],
                       "required": None} for t in TOOLS]
    assert system.startswith("You are a function calling AI model. You are provided with function signatures")
    assert "<tool_call>" in system and system.endswith("\n\nYou are a careful agent.")


def test_round_trip_of_calls_and_results():
    turns = to_sharegpt("", RUN, TOOLS)
    calls = [c for t in turns if t["from"] == "gpt" for c in parse_tagged(t["value"], "tool_call")]
    uses = [b for msg in RUN for b in m.tool_uses(msg)]
    assert calls == [{"name": b["name"], "arguments": b["input"]} for b in uses]
    responses = [r for t in turns if t["from"] == "tool" for r in parse_tagged(t["value"], "tool_response")]
    results = [b for msg in RUN for b in m.blocks_of(msg, "tool_result")]
    assert [(r["tool_call_id"], r["content"]) for r in responses] == [(b["tool_use_id"], b["content"]) for b in results]
    assert [r["name"] for r in responses] == ["list_files", "terminal", "read_file"]


def test_model_neutral_view():
    msgs = to_messages("sys", RUN + [m.assistant([m.text("<think>why</think>done")])])
    assert [x["role"] for x in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                                         "assistant", "assistant"]
    assert all(set(x) == {"role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name"} for x in msgs)
    first = msgs[2]
    assert first["reasoning_content"] == "I should list files first." and first["content"] == "Let me look."
    assert first["tool_calls"][0] == {"id": "toolu_1", "type": "function",
                                      "function": {"name": "list_files", "arguments": '{"glob": "*.py"}'}}
    assert [(x["tool_call_id"], x["name"]) for x in msgs if x["role"] == "tool"] == [
        ("toolu_1", "list_files"), ("toolu_2", "terminal"), ("toolu_3", "read_file")]
    assert msgs[-1]["reasoning_content"] == "why" and msgs[-1]["content"] == "done"
    schemas = tool_schemas(TOOLS)
    assert schemas[0] == {"type": "function", "function": {"name": TOOLS[0]["name"],
                                                          "description": TOOLS[0]["description"],
                                                          "parameters": TOOLS[0]["input_schema"]}}


def test_json_line_with_one_schema():
    turns = to_sharegpt("sys", RUN, TOOLS)
    line = json.dumps({"conversations": turns}, ensure_ascii=False)
    assert json.loads(line)["conversations"] == turns
    assert all(set(t) == {"from", "value"} and isinstance(t["value"], str) and t["value"] for t in turns)


def test_user_text_after_results_and_plain_string_content():
    msgs = [{"role": "user", "content": "plain"},
            m.assistant([m.tool_use("terminal", {"command": "ls"}, id="t1")]),
            m.user(m.tool_result("t1", "a"), "[the job was asked to stop]")]
    assert [t["from"] for t in to_sharegpt("", msgs, [])] == ["system", "human", "gpt", "tool", "human"]


def test_has_reasoning():
    assert has_reasoning(RUN)
    assert not has_reasoning([m.user("hi"), m.assistant([m.text("hello")])])
    assert not has_reasoning([m.assistant([m.thinking("  ", "")])])
    assert has_reasoning([m.assistant([m.text("<REASONING_SCRATCHPAD>plan</REASONING_SCRATCHPAD> ok")])])
    assert has_reasoning([m.assistant([m.text("<think>plan</think>ok")])])
    assert not has_reasoning([m.user("<REASONING_SCRATCHPAD> in a prompt does not count")])


def test_tool_calls_and_stats():
    msgs = RUN + [m.assistant([m.tool_use("browser_click", {}, id="x1"), m.tool_use("terminal", {"command": "ls"},
                                                                                     id="x2")])]
    assert tool_calls_in(msgs) == ["list_files", "terminal", "read_file", "browser_click", "terminal"]
    stats = tool_stats(msgs)
    assert list(stats) == known_tool_names()
    assert stats["list_files"] == {"count": 1, "success": 1, "failure": 0}
    assert stats["terminal"] == {"count": 2, "success": 0, "failure": 2}  # one error, one never answered
    assert stats["read_file"] == {"count": 1, "success": 1, "failure": 0}
    assert stats["kanban_create"] == {"count": 0, "success": 0, "failure": 0}
    assert "browser_click" not in stats
