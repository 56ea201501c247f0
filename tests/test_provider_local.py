"""The ``local`` provider: SmolLM2-135M-Instruct makes well-formed tool calls and finishes.

Slow (loads a real model, ~100 MB); skipped when ``hermesd[local]`` is not installed.
The model runs in a subprocess, never in pytest's own process: a crash inside llama.cpp
is then one failing test naming the signal, and the rest of the suite still reports.
The schema and build checks need neither and always run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from batch import trajectories
from child.providers import llama_build, local
from child.providers.base import ProviderError
from hermesd.exits import signal_name

ROOT = Path(__file__).resolve().parent.parent

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
    t = "I will list the files first."
    good = [{"thought": t, "tool": "terminal", "arguments": {"command": "ls"}},
            {"thought": t, "tool": "file", "arguments": {"action": "read", "path": "a.txt"}},
            {"thought": "I have done it.", "final_answer": "done"}]
    for action in good:
        jsonschema.validate(action, schema)
    bad = [{"thought": t, "tool": "web", "arguments": {}},
           {"thought": t, "tool": "file", "arguments": {"action": "delete", "path": "a"}},
           {"thought": t, "tool": "terminal", "arguments": {"command": "x" * (local.ARG_CHARS + 1)}},
           # a lone word or an ellipsis is no reasoning (the batch would discard the sample)
           {"thought": "...", "tool": "terminal", "arguments": {"command": "ls"}},
           {"thought": "has_close_elements", "final_answer": "done"}]
    for action in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(action, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(good[0], local.action_schema(TOOLS, only_final=True))


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ProviderError, match="unknown local model|hermesd\\[local\\]"):
        local.LocalProvider("gpt-5")


def model_steps() -> dict:
    """Run in a subprocess (:func:`steps`): load the model, take the first step, feed tool
    results until a final answer, then take the first step again (same prompt, same seed, the
    model's context holding a longer conversation with the same prefix).  Returns JSON-able data."""
    p = local.LocalProvider()
    t0 = time.monotonic()
    p._llama()
    load = time.monotonic() - t0
    t0 = time.monotonic()
    first = p.complete(SYSTEM, [ASK], TOOLS, max_tokens=1024)
    step_seconds = time.monotonic() - t0
    step, messages, more = first, [ASK, {"role": "assistant", "content": first.content}], []
    uses = [b for b in first.content if b["type"] == "tool_use"]
    for _ in range(local.FINAL_AFTER if uses else 0):
        result = {"type": "tool_result", "tool_use_id": uses[-1]["id"], "content": "hello\n", "is_error": False}
        messages.append({"role": "user", "content": [result]})
        step = p.complete(SYSTEM, messages, TOOLS, max_tokens=1024)
        messages.append({"role": "assistant", "content": step.content})
        more.append(vars(step))
        if step.stop_reason == "end_turn":
            break
        uses = [b for b in step.content if b["type"] == "tool_use"] or uses
    # the first prompt again, after longer conversations that share its prefix were evaluated
    again = p.complete(SYSTEM, [ASK], TOOLS, max_tokens=1024)
    return {"load_seconds": load, "step_seconds": step_seconds, "first": vars(first), "again": vars(again),
            "more": more}


@pytest.fixture(scope="module")
def steps() -> dict:
    """:func:`model_steps` in a subprocess: a crash inside llama.cpp (SIGSEGV, SIGILL) fails the
    tests that need the model, with the signal and the subprocess's last output, and the rest of
    the suite still runs and reports."""
    code = "import json, tests.test_provider_local as t; print('STEPS ' + json.dumps(t.model_steps()))"
    out = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    if out.returncode != 0:
        how = f"killed by {signal_name(out.returncode)}" if out.returncode < 0 else f"exit status {out.returncode}"
        pytest.fail(f"the local model's subprocess died ({how}) before it answered: a crash in llama.cpp "
                    f"(see docs/operations.md, \"The embedded model\"); its stderr ends:\n{out.stderr[-1500:]}",
                    pytrace=False)
    data = json.loads(out.stdout.rpartition("STEPS ")[2])
    print(f"\nlocal model load {data['load_seconds']:.2f}s, one step {data['step_seconds']:.2f}s: {data['first']}")
    return data


@pytest.mark.slow
@pytest.mark.cpu
@needs_model
def test_tool_call_then_final_answer(steps):
    step = steps["first"]
    assert step["stop_reason"] == "tool_use"
    uses = [b for b in step["content"] if b["type"] == "tool_use"]
    assert len(uses) == 1 and uses[0]["name"] in {"terminal", "file"}
    jsonschema.validate(uses[0]["input"], {"terminal": TERMINAL, "file": FILE}[uses[0]["name"]]["input_schema"])
    thoughts = [b for b in step["content"] if b["type"] == "thinking"]
    assert all(b["signature"] == "" for b in thoughts)
    assert thoughts and trajectories.real_reasoning(thoughts[0]["thinking"], {uses[0]["input"].get("command", "")}), thoughts
    assert step["usage"]["input"] > 0 and step["usage"]["output"] > 0
    final = steps["more"][-1]
    print(f"final after {len(steps['more'])} more steps: {final['content']}")
    assert final["stop_reason"] == "end_turn"
    assert [b["type"] for b in final["content"]][-1] == "text" and final["content"][-1]["text"]


@pytest.mark.slow
@pytest.mark.cpu
@needs_model
def test_same_prompt_same_step(steps):
    strip = [{k: v for k, v in blk.items() if k != "id"} for blk in steps["first"]["content"]]
    assert strip == [{k: v for k, v in blk.items() if k != "id"} for blk in steps["again"]["content"]]


@pytest.mark.slow
@pytest.mark.cpu
@needs_model
def test_loaded_without_weight_repacking_and_the_build_fits_this_cpu():
    """The two guards of :mod:`child.providers.llama_build`, checked in a subprocess too."""
    code = ("from child.providers import local, llama_build; p = local.LocalProvider(); "
            "print(p._llama().model_params.use_extra_bufts, llama_build.mismatch())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.split() == ["False", "[]"]


def test_build_mismatch_names_what_the_cpu_lacks():
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 0 | REPACK = 1 |"
    assert llama_build.compiled_features(info) == ["SSE3", "AVX", "AVX2", "AVX512", "AVX512_VNNI"]
    zen3 = {"pni", "avx", "avx2", "fma", "f16c", "bmi2"}
    assert llama_build.mismatch(info, zen3) == ["AVX512", "AVX512_VNNI"]
    assert llama_build.mismatch(info, zen3 | {"avx512f", "avx512_vnni"}) == []
    assert llama_build.mismatch(info, set()) == []  # no /proc/cpuinfo flags: nothing to compare
    assert llama_build.cpu_flags("processor : 0\nflags : fpu avx2 fma\n") == {"fpu", "avx2", "fma"}
