"""The ``local`` provider: SmolLM2-135M-Instruct makes well-formed tool calls and finishes.

Slow (loads a real model, ~100 MB); skipped when ``hermesd[local]`` is not installed.
The schema checks need neither and always run.
"""

from __future__ import annotations

import time

import jsonschema
import pytest

from child.providers import local
from child.providers.base import ProviderError

TERMINAL = {
    "name": "terminal",
    "description": "Run a shell command in the job's working directory and return its output.",
    "input_schema": {"type": "object", "properties": {
        "command": {"type": "string", "description": "the shell command"},
        "timeout": {"type": "integer", "description": "seconds"}}, "required": ["command"]},
}
FILE = {
    "name": "file",
    "description": "Read, write or list files in the working directory.",
    "input_schema": {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["read", "write", "list"]},
        "path": {"type": "string"},
        "content": {"type": "string", "description": "text to write"}},
        "required": ["action", "path"]},
}
TOOLS = [TERMINAL, FILE]
SYSTEM = "You are a helpful agent. Use the tools to do the task, then answer."
ASK = {"role": "user", "content": [{"type": "text", "text": "Run the command `echo hello` with the terminal tool."}]}

needs_model = pytest.mark.skipif(not local.available(), reason=f"local model not installed: {local.INSTALL_HINT}")


def test_action_schema_is_a_union_over_tools_and_final_answer():
    schema = local.action_schema(TOOLS)
    good = [{"thought": "t", "tool": "terminal", "arguments": {"command": "ls"}},
            {"thought": "t", "tool": "file", "arguments": {"action": "read", "path": "a.txt"}},
            {"thought": "t", "final_answer": "done"}]
    for action in good:
        jsonschema.validate(action, schema)
    bad = [{"thought": "t", "tool": "web", "arguments": {}},
           {"thought": "t", "tool": "file", "arguments": {"action": "delete", "path": "a"}},
           {"thought": "t", "tool": "terminal", "arguments": {"command": "x" * (local.ARG_CHARS + 1)}}]
    for action in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(action, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(good[0], local.action_schema(TOOLS, only_final=True))


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ProviderError, match="unknown local model|hermesd\\[local\\]"):
        local.LocalProvider("gpt-5")


@pytest.fixture(scope="module")
def provider():
    p = local.LocalProvider()
    t0 = time.monotonic()
    p._llama()
    print(f"\nlocal model load: {time.monotonic() - t0:.2f}s")
    return p


@pytest.fixture(scope="module")
def first_step(provider):
    t0 = time.monotonic()
    step = provider.complete(SYSTEM, [ASK], TOOLS, max_tokens=1024)
    print(f"\none step: {time.monotonic() - t0:.2f}s, usage {step.usage}, content {step.content}")
    return step


@pytest.mark.slow
@needs_model
def test_tool_call_then_final_answer(provider, first_step):
    step = first_step
    assert step.stop_reason == "tool_use"
    uses = [b for b in step.content if b["type"] == "tool_use"]
    assert len(uses) == 1 and uses[0]["name"] in {"terminal", "file"}
    jsonschema.validate(uses[0]["input"], {"terminal": TERMINAL, "file": FILE}[uses[0]["name"]]["input_schema"])
    assert all(b["signature"] == "" for b in step.content if b["type"] == "thinking")
    assert step.usage["input"] > 0 and step.usage["output"] > 0

    messages = [ASK, {"role": "assistant", "content": step.content}]
    for _ in range(local.FINAL_AFTER):
        result = {"type": "tool_result", "tool_use_id": uses[-1]["id"], "content": "hello\n", "is_error": False}
        messages.append({"role": "user", "content": [result]})
        step = provider.complete(SYSTEM, messages, TOOLS, max_tokens=1024)
        messages.append({"role": "assistant", "content": step.content})
        if step.stop_reason == "end_turn":
            break
        uses = [b for b in step.content if b["type"] == "tool_use"]
    print(f"final after {(len(messages) - 2) // 2} more steps: {step.content}")
    assert step.stop_reason == "end_turn"
    assert [b["type"] for b in step.content][-1] == "text" and step.content[-1]["text"]


@pytest.mark.slow
@needs_model
def test_same_prompt_same_step(provider, first_step):
    a, b = first_step, provider.complete(SYSTEM, [ASK], TOOLS, max_tokens=1024)
    strip = [{k: v for k, v in blk.items() if k != "id"} for blk in a.content]
    assert strip == [{k: v for k, v in blk.items() if k != "id"} for blk in b.content]
