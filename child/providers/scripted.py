"""The ``scripted`` provider: deterministic replies, for tests and instant demos.

No model is called, so every result is marked ``synthetic`` (nobody trains on
it).  With a script (the job spec's ``script``), each :meth:`complete` plays the
next step::

    {"thinking"?: str, "text"?: str, "tool_calls"?: [{"name", "input", "id"?}],
     "sleep"?: seconds, "stream"?: seconds, "error"?: str, "retryable"?: bool, "hold_mb"?: MiB}

A step with ``tool_calls`` asks for those tools; a step without is the final
answer (its ``text``).  ``sleep`` waits first (cut short by the stop flag;
default ``$HERMES_SCRIPTED_STEP_SECONDS``, else 0: a demo whose jobs must still
be running a moment later sets it, e.g. ``HERMES_DEMO_PROVIDER=scripted bash demo.sh``);
shows no activity, like a model server that does not answer; ``stream`` takes
that long as a streamed reply does, with activity all along;
``error`` raises :class:`ProviderError` instead of answering; ``hold_mb`` makes the agent's
own process hold that many MiB more (written, so resident) for the rest of its run, before the
step's ``sleep`` — as an agent whose history grows does (a test of its memory limit).  When the script
runs out, the reply is a final answer that quotes the goal.

Without a script the plan comes from the goal and the tools offered: think,
run ``pwd`` with a tool that takes a ``command`` (the ``terminal`` toolset),
list the working directory (``list_files``, the ``file`` toolset: nothing is
written anywhere), then the final answer.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from child import messages as m
from child.providers.base import Completion, ProviderError, touch

LIST_TOOL = "list_files"
"""The file tool the default plan calls: it only reads (a demo's job writes nothing into the
directory it was started from)."""
STREAM_EVENT_SECONDS = 0.2
"""Seconds between the streamed events of a ``stream`` step."""

STEP_SECONDS_ENV = "HERMES_SCRIPTED_STEP_SECONDS"
"""Environment variable (inherited from the daemon): seconds each step without its own ``sleep`` waits."""


class ScriptedProvider:
    """Replays ``script`` (a list of steps, see the module doc) or the default plan.

    ``goal``: the job's goal, quoted in the final answer; ``stop``: the child's
    stop flag (``.event``), which cuts a ``sleep`` short; ``model``: a label.
    """

    name = "scripted"
    synthetic = True

    @classmethod
    def for_job(cls, spec: dict[str, Any], *, model: str | None, stop: Any) -> "ScriptedProvider":
        """The provider of a job (:func:`child.providers.select.make_provider`): the job
        spec's ``script`` and ``goal``; ``stop`` (the child's stop flag) cuts sleeps short."""
        return cls(spec.get("script"), goal=str(spec.get("goal") or ""), model=model, stop=stop)

    def __init__(self, script: list[dict[str, Any]] | None = None, *, goal: str = "",
                 model: str | None = None, stop: Any = None):
        self.script = list(script) if script is not None else None
        self.goal = goal
        self.model = model or "scripted"
        self.stop = stop
        self._played = 0
        self._held: list[bytearray] = []  # what ``hold_mb`` steps keep
        try:
            self.step_seconds = max(0.0, float(os.environ.get(STEP_SECONDS_ENV) or 0))
        except ValueError:
            raise ProviderError(f"{STEP_SECONDS_ENV}={os.environ[STEP_SECONDS_ENV]!r}: not a number of seconds") from None

    def complete(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 *, max_tokens: int = 4096, reasoning_effort: str | None = None) -> Completion:
        """Return the next step as a :class:`Completion` (see the module doc)."""
        if self.script is None:
            self.script = default_plan(self.goal, tools)
        step = self.script[self._played] if self._played < len(self.script) else None
        self._played += 1
        if step is None:
            step = {"text": final_answer(self.goal, messages)}
        if step.get("hold_mb"):
            self._held.append(bytearray(b"\1") * (int(step["hold_mb"]) << 20))
        self._sleep(float(step["sleep"]) if step.get("sleep") is not None else self.step_seconds)
        self._stream(float(step.get("stream") or 0))
        if step.get("error"):
            raise ProviderError(str(step["error"]), retryable=bool(step.get("retryable")))
        content = self._blocks(step, messages)
        calls = any(b["type"] == "tool_use" for b in content)
        prompt = len(system) + len(json.dumps(messages))
        usage = {"input": prompt // 4, "output": len(json.dumps(content)) // 4}
        return Completion(content, stop_reason="tool_use" if calls else "end_turn", usage=usage)

    def resume(self, api_calls: int) -> None:
        """The run was resumed from its journal after ``api_calls`` model calls
        (:mod:`child.journal`): the script goes on from the step after them."""
        self._played = api_calls

    def _sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.stop is not None:
            self.stop.event.wait(seconds)
        else:
            time.sleep(seconds)

    def _stream(self, seconds: float) -> None:
        """Take ``seconds`` as a streamed reply would: activity every :data:`STREAM_EVENT_SECONDS`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (self.stop is not None and self.stop.is_set()):
            touch(self, "streaming the model's reply")
            self._sleep(min(STREAM_EVENT_SECONDS, max(0.0, deadline - time.monotonic())))

    def _blocks(self, step: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        blocks = []
        if step.get("thinking"):
            blocks.append(m.thinking(str(step["thinking"])))
        calls = step.get("tool_calls") or []
        if step.get("text"):
            blocks.append(m.text(str(step["text"])))
        elif not calls:
            blocks.append(m.text(final_answer(self.goal, messages)))
        for i, call in enumerate(calls):
            call_id = call.get("id") or f"toolu_scripted_{self._played}_{i}"
            blocks.append(m.tool_use(str(call["name"]), dict(call.get("input") or {}), id=call_id))
        return blocks


def default_plan(goal: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps played without a script: use what the offered ``tools`` allow."""
    steps = []
    shell = _find_tool(tools, {"command": "pwd"})
    if shell:
        steps.append({"thinking": f"The goal is: {goal}\nFirst I look at where I am.",
                      "tool_calls": [shell]})
    if any(tool.get("name") == LIST_TOOL for tool in tools):
        steps.append({"thinking": "I look at the files here (and change none: nobody asked me to).",
                      "tool_calls": [{"name": LIST_TOOL, "input": {}}]})
    return steps


def _find_tool(tools: list[dict[str, Any]], wanted: dict[str, Any]) -> dict[str, Any] | None:
    """A call ``{"name", "input"}`` of the first tool whose schema takes every key
    of ``wanted`` and whose other required arguments have an enum naming ``write``
    (e.g. an ``action`` argument); ``None`` if no tool fits."""
    for tool in tools:
        props = tool.get("input_schema", {}).get("properties", {})
        if not set(wanted) <= set(props):
            continue
        args = dict(wanted)
        for name in tool.get("input_schema", {}).get("required", []):
            if name not in args:
                if "write" not in props.get(name, {}).get("enum", []):
                    break
                args[name] = "write"
        else:
            return {"name": tool["name"], "input": args}
    return None


def final_answer(goal: str, messages: list[dict[str, Any]]) -> str:
    """The scripted final answer: quotes ``goal`` and the first line of each tool
    result seen in ``messages``."""
    lines = [f'Scripted run (synthetic, no model was called) for the goal: "{goal}".']
    for message in messages:
        for block in m.blocks_of(message, "tool_result"):
            first = (str(block.get("content") or "").strip().splitlines() or [""])[0]
            status = "error" if block.get("is_error") else "ok"
            lines.append(f"- tool result ({status}): {first[:200]}")
    return "\n".join(lines)
