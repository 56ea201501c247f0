"""A run's messages as a ShareGPT trajectory, and the counts the batch job keeps (SPEC §6).

Input: the internal messages of :mod:`child.messages` — ``{"role": "user" |
"assistant", "content": [blocks]}`` with Anthropic-style blocks ``text``,
``thinking``, ``tool_use`` and ``tool_result`` (a plain string ``content`` is
read as one text block).

Output: a list of ``{"from", "value"}`` turns, both strings, in the Hermes
function-calling format used for fine-tuning data:

* ``system``: the tool-calling instructions with the tools as JSON inside
  ``<tools>…</tools>``, then the agent's own system prompt;
* ``human``: user text;
* ``gpt``: ``<think>\\n…\\n</think>`` for each thinking block, the text, and each
  tool call as ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>``, in
  the order the model produced them;
* ``tool``: the results answering one assistant turn, each as
  ``<tool_response>\\n{"tool_call_id": …, "name": …, "content": …}\\n</tool_response>``.
"""

from __future__ import annotations

import json
from typing import Any

from child.messages import blocks_of, tool_uses
from child.tools.registry import known_tool_names

REASONING_MARKERS = ("<REASONING_SCRATCHPAD>", "<think>")
"""Text that counts as visible reasoning when a model writes it inline (no thinking block)."""

SYSTEM_TEMPLATE = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools> </tools> XML tags. You may call one or more functions to assist with the user query. "
    "Don't make assumptions about what values to plug into functions. After calling & executing the "
    "functions, you will be provided with function results within <tool_response> </tool_response> "
    "XML tags. Here are the available tools:\n"
    "<tools>\n{tools}\n</tools>\n"
    "For each function call return a JSON object with the function name and arguments within "
    "<tool_call> </tool_call> XML tags, as follows:\n"
    "<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-dict>}}\n</tool_call>"
)
"""The ``system`` turn's preamble (Hermes function-calling format); ``{tools}`` is the tool list."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _ordered_blocks(message: dict) -> list[dict]:
    """Every block of ``message`` in order (plain-string content as one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _result_text(content: Any) -> str:
    """A ``tool_result`` block's content as text (a string, or a list of text blocks)."""
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def system_turn(system: str, tools: list[dict]) -> str:
    """The ``system`` turn's value: :data:`SYSTEM_TEMPLATE` with ``tools`` (maps with
    ``name``, ``description`` and ``input_schema`` or ``parameters``) listed as
    ``{"name", "description", "parameters"}`` JSON, then ``system`` if not empty."""
    listed = [{"name": t.get("name", ""), "description": t.get("description", ""),
               "parameters": t.get("input_schema", t.get("parameters", {}))} for t in tools]
    preamble = SYSTEM_TEMPLATE.format(tools="\n".join(_dumps(t) for t in listed))
    return f"{preamble}\n\n{system}" if system else preamble


def _gpt_value(blocks: list[dict]) -> str:
    parts = []
    for block in blocks:
        kind = block.get("type")
        if kind == "thinking" and block.get("thinking"):
            parts.append(f"<think>\n{block['thinking']}\n</think>")
        elif kind == "text" and block.get("text"):
            parts.append(block["text"])
        elif kind == "tool_use":
            call = {"name": block.get("name", ""), "arguments": block.get("input") or {}}
            parts.append(f"<tool_call>\n{_dumps(call)}\n</tool_call>")
    return "\n".join(parts)


def _tool_value(blocks: list[dict], names: dict[str, str]) -> str:
    responses = []
    for block in blocks:
        call_id = str(block.get("tool_use_id", ""))
        body = {"tool_call_id": call_id, "name": names.get(call_id, ""), "content": _result_text(block.get("content"))}
        responses.append(f"<tool_response>\n{_dumps(body)}\n</tool_response>")
    return "\n".join(responses)


def to_sharegpt(system: str, messages: list[dict], tools: list[dict]) -> list[dict[str, str]]:
    """Convert a run to ShareGPT turns ``[{"from": "system"|"human"|"gpt"|"tool", "value": str}]``.

    ``system``: the agent's system prompt; ``messages``: the run's internal
    messages; ``tools``: the tool specs the model was offered.  Every value is a
    string, so each trajectory is one JSON line of one schema.  The results in
    one user message form one ``tool`` turn; text in that message follows as a
    ``human`` turn.  Empty turns are left out.
    """
    turns = [{"from": "system", "value": system_turn(system, tools)}]
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "assistant":
            names.update((str(b.get("id", "")), str(b.get("name", ""))) for b in tool_uses(message))
            candidates = [("gpt", _gpt_value(_ordered_blocks(message)))]
        else:
            text = "\n".join(b["text"] for b in blocks_of(message, "text") if b.get("text"))
            candidates = [("tool", _tool_value(blocks_of(message, "tool_result"), names)), ("human", text)]
        turns.extend({"from": who, "value": value} for who, value in candidates if value)
    return turns


def _assistant_blocks(messages: list[dict], kind: str):
    for message in messages:
        if message.get("role") == "assistant":
            yield from blocks_of(message, kind)


def has_reasoning(messages: list[dict]) -> bool:
    """True when any assistant turn shows reasoning: a non-empty ``thinking``
    block, or text containing one of :data:`REASONING_MARKERS` (SPEC §6: samples
    without reasoning are discarded)."""
    if any(str(b.get("thinking", "")).strip() for b in _assistant_blocks(messages, "thinking")):
        return True
    texts = (str(b.get("text", "")) for b in _assistant_blocks(messages, "text"))
    return any(marker in text for text in texts for marker in REASONING_MARKERS)


def tool_calls_in(messages: list[dict]) -> list[str]:
    """The names of every tool the model called, in order, repeats and unknown
    names included (the batch filter drops runs that call a name outside the valid list)."""
    return [str(b.get("name", "")) for b in _assistant_blocks(messages, "tool_use")]


def tool_stats(messages: list[dict]) -> dict[str, dict[str, int]]:
    """``{tool: {"count", "success", "failure"}}`` for every known tool (zeros
    included, so every line has the same keys).

    A call counts as a failure when its result has ``is_error`` or never came
    (the run stopped first).  Calls to unknown tool names are not counted here
    (see :func:`tool_calls_in`).
    """
    stats = {name: {"count": 0, "success": 0, "failure": 0} for name in known_tool_names()}
    failed = {str(b.get("tool_use_id", "")): bool(b.get("is_error"))
              for message in messages for b in blocks_of(message, "tool_result")}
    for block in _assistant_blocks(messages, "tool_use"):
        if block.get("name") in stats:
            entry = stats[block["name"]]
            entry["count"] += 1
            entry["failure" if failed.get(str(block.get("id", "")), True) else "success"] += 1
    return stats
