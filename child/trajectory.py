"""A run's messages as training data: Hermes' ShareGPT turns and a model-neutral view.

Input: the internal messages of :mod:`child.messages` — ``{"role": "user" |
"assistant", "content": [blocks]}`` with Anthropic-style blocks ``text``,
``thinking``, ``tool_use`` and ``tool_result`` (a plain string ``content`` is
read as one text block) — and the tool specs the model was offered.

**ShareGPT** (:func:`to_sharegpt`): ``[{"from", "value"}]``, both strings, rendered
exactly as Hermes Agent's ``AIAgent._convert_to_trajectory_format`` (run_agent.py,
which batch_runner.py calls) does:

* ``system``: Hermes' function-calling preamble, the offered tools as one JSON
  array of ``{"name", "description", "parameters", "required": null}`` inside
  ``<tools>…</tools>`` (each tool once), then — hermesd's addition — the agent's
  own system prompt after a blank line;
* ``human``: user text;
* ``gpt``: always starts with a ``<think>`` block: ``<think>\\n{reasoning}\\n</think>\\n``
  (thinking blocks) or ``<think>\\n</think>\\n`` when there was none; then the text,
  with ``<REASONING_SCRATCHPAD>`` tags turned into ``<think>`` tags; then each call
  as ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>``.  Turns with
  calls are right-stripped, turns without are stripped (Hermes' rule);
* ``tool``: the results answering one assistant turn, each as
  ``<tool_response>\\n{"tool_call_id", "name", "content"}\\n</tool_response>``,
  joined by newlines; a result whose text starts with ``{`` or ``[`` and parses
  is embedded as JSON, not as an escaped string.

**Model-neutral** (:func:`to_messages`, :func:`tool_schemas`): the OpenAI chat
shape that ``transformers`` chat templates, TRL and axolotl read as it is, with
one key set on every message so the Arrow schema never depends on the tools::

    {"role": "system"|"user"|"assistant"|"tool", "content": str,
     "reasoning_content": str,           # the assistant's reasoning ("" when none)
     "tool_calls": [{"id": str, "type": "function",
                     "function": {"name": str, "arguments": str}}],   # arguments: JSON text
     "tool_call_id": str, "name": str}  # a tool message: the call it answers

and the tools offered as OpenAI function schemas
``[{"type": "function", "function": {"name", "description", "parameters"}}]``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from child.messages import INVALID_JSON, blocks_of, tool_uses
from child.tools.registry import known_tool_names

SCRATCHPAD_OPEN, SCRATCHPAD_CLOSE = "<REASONING_SCRATCHPAD>", "</REASONING_SCRATCHPAD>"
REASONING_MARKERS = (SCRATCHPAD_OPEN, "<think>")
"""Text that counts as visible reasoning when a model writes it inline (no thinking block)."""

HERMES_PREAMBLE = (
    "You are a function calling AI model. You are provided with function signatures within <tools> </tools> XML tags. "
    "You may call one or more functions to assist with the user query. If available tools are not relevant in assisting "
    "with user query, just respond in natural conversational language. Don't make assumptions about what values to plug "
    "into functions. After calling & executing the functions, you will be provided with function results within "
    "<tool_response> </tool_response> XML tags. Here are the available tools:\n"
    "<tools>\n{tools}\n</tools>\n"
    "For each function call return a JSON object, with the following pydantic model json schema for each:\n"
    "{{'title': 'FunctionCall', 'type': 'object', 'properties': {{'name': {{'title': 'Name', 'type': 'string'}}, "
    "'arguments': {{'title': 'Arguments', 'type': 'object'}}}}, 'required': ['name', 'arguments']}}\n"
    "Each function call should be enclosed within <tool_call> </tool_call> XML tags.\n"
    "Example:\n<tool_call>\n{{'name': <function-name>,'arguments': <args-dict>}}\n</tool_call>"
)
"""The ``system`` turn's preamble, word for word Hermes Agent's (``{tools}``: the tool list)."""

EMPTY_THINK = "<think>\n</think>\n"
_INLINE_REASONING = re.compile(r"<(think|REASONING_SCRATCHPAD)>(.*?)</\1>\s*", re.S)


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


def _parameters(tool: dict) -> dict:
    return tool.get("input_schema", tool.get("parameters", {}))


def convert_scratchpad_to_think(text: str) -> str:
    """``<REASONING_SCRATCHPAD>``/``</REASONING_SCRATCHPAD>`` replaced by ``<think>``/``</think>`` (Hermes' rule)."""
    return text.replace(SCRATCHPAD_OPEN, "<think>").replace(SCRATCHPAD_CLOSE, "</think>")


def system_turn(system: str, tools: list[dict]) -> str:
    """The ``system`` turn's value: :data:`HERMES_PREAMBLE` with ``tools`` (maps with
    ``name``, ``description`` and ``input_schema`` or ``parameters``) as one JSON
    array, then ``system`` after a blank line when not empty."""
    listed = [{"name": t.get("name", ""), "description": t.get("description", ""), "parameters": _parameters(t),
               "required": None} for t in tools]
    preamble = HERMES_PREAMBLE.format(tools=_dumps(listed))
    return f"{preamble}\n\n{system}" if system else preamble


def _arguments(block: dict) -> Any:
    """A tool_use's arguments as given; the raw text when they did not parse as JSON."""
    args = block.get("input")
    if isinstance(args, dict) and INVALID_JSON in args:
        return None
    return args if args is not None else {}


def _raw_arguments(block: dict) -> str:
    args = block.get("input")
    return str(args.get(INVALID_JSON)) if isinstance(args, dict) and INVALID_JSON in args else _dumps(args or {})


def _split(blocks: list[dict]) -> tuple[str, str, list[dict]]:
    """An assistant message's reasoning (thinking blocks), text and tool_use blocks."""
    reasoning = "\n".join(str(b.get("thinking", "")) for b in blocks
                          if b.get("type") == "thinking" and str(b.get("thinking", "")).strip())
    text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text" and b.get("text"))
    return reasoning, text, [b for b in blocks if b.get("type") == "tool_use"]


def _tool_call_text(block: dict) -> str:
    args = _arguments(block)
    if args is None:  # arguments that are not JSON: shown as they came, so the line is found and filtered
        return f'<tool_call>\n{{"name": {_dumps(block.get("name", ""))}, "arguments": {_raw_arguments(block)}}}\n</tool_call>\n'
    return f"<tool_call>\n{_dumps({'name': block.get('name', ''), 'arguments': args})}\n</tool_call>\n"


def gpt_value(blocks: list[dict]) -> str:
    """One assistant message as a ``gpt`` value (Hermes' rules, see the module doc)."""
    reasoning, text, calls = _split(blocks)
    value = f"<think>\n{reasoning}\n</think>\n" if reasoning.strip() else ""
    if calls:
        if text.strip():
            value += convert_scratchpad_to_think(text) + "\n"
        value += "".join(_tool_call_text(b) for b in calls)
    else:
        value += convert_scratchpad_to_think(text)
    if "<think>" not in value:
        value = EMPTY_THINK + value
    return value.rstrip() if calls else value.strip()


def _embedded(content: str) -> Any:
    """Tool output that looks like JSON and parses, as JSON; otherwise the text (Hermes' rule)."""
    if content.strip().startswith(("{", "[")):
        try:
            return json.loads(content)
        except ValueError:
            pass
    return content


def _tool_value(blocks: list[dict], names: dict[str, str]) -> str:
    responses = []
    for block in blocks:
        call_id = str(block.get("tool_use_id", ""))
        body = {"tool_call_id": call_id, "name": names.get(call_id, "unknown"),
                "content": _embedded(_result_text(block.get("content")))}
        responses.append(f"<tool_response>\n{_dumps(body)}\n</tool_response>")
    return "\n".join(responses)


def _call_names(message: dict) -> dict[str, str]:
    return {str(b.get("id", "")): str(b.get("name", "")) for b in tool_uses(message)}


def to_sharegpt(system: str, messages: list[dict], tools: list[dict]) -> list[dict[str, str]]:
    """Convert a run to ShareGPT turns ``[{"from": "system"|"human"|"gpt"|"tool", "value": str}]``.

    ``system``: the agent's system prompt; ``messages``: the run's internal
    messages; ``tools``: the tool specs the model was offered.  The results in
    one user message form one ``tool`` turn; text in that message follows as a
    ``human`` turn.  Empty human and tool turns are left out; every assistant
    message gives a ``gpt`` turn.
    """
    turns = [{"from": "system", "value": system_turn(system, tools)}]
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "assistant":
            names.update(_call_names(message))
            turns.append({"from": "gpt", "value": gpt_value(_ordered_blocks(message))})
            continue
        text = "\n".join(b["text"] for b in blocks_of(message, "text") if b.get("text"))
        for who, value in (("tool", _tool_value(blocks_of(message, "tool_result"), names)), ("human", text)):
            if value:
                turns.append({"from": who, "value": value})
    return turns


def _message(role: str, content: str = "", *, reasoning: str = "", calls: list[dict] | None = None,
             call_id: str = "", name: str = "") -> dict[str, Any]:
    return {"role": role, "content": content, "reasoning_content": reasoning, "tool_calls": calls or [],
            "tool_call_id": call_id, "name": name}


def split_inline_reasoning(text: str) -> tuple[str, str]:
    """``(reasoning, rest)``: ``<think>``/``<REASONING_SCRATCHPAD>`` blocks written in
    the text, taken out of it (for the model-neutral ``reasoning_content``)."""
    found = [body.strip() for _tag, body in _INLINE_REASONING.findall(text)]
    return "\n".join(f for f in found if f), _INLINE_REASONING.sub("", text).strip()


def to_messages(system: str, messages: list[dict]) -> list[dict[str, Any]]:
    """The model-neutral view of a run (see the module doc): the system prompt,
    then every message; each tool result becomes its own ``tool`` message tied to
    its call by ``tool_call_id`` (and ``name``)."""
    out = [_message("system", system)] if system else []
    names: dict[str, str] = {}
    for message in messages:
        blocks = _ordered_blocks(message)
        if message.get("role") == "assistant":
            names.update(_call_names(message))
            reasoning, text, uses = _split(blocks)
            inline, text = split_inline_reasoning(text)
            calls = [{"id": str(b.get("id", "")), "type": "function",
                      "function": {"name": str(b.get("name", "")), "arguments": _raw_arguments(b)}} for b in uses]
            out.append(_message("assistant", text, reasoning="\n".join(r for r in (reasoning, inline) if r),
                                calls=calls))
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id", ""))
                out.append(_message("tool", _result_text(block.get("content")), call_id=call_id,
                                    name=names.get(call_id, "")))
        text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text" and b.get("text"))
        if text:
            out.append(_message("user", text))
    return out


def tool_schemas(tools: list[dict]) -> list[dict[str, Any]]:
    """The offered tools as OpenAI function schemas ``{"type": "function", "function":
    {"name", "description", "parameters"}}`` (what ``apply_chat_template(tools=…)`` takes)."""
    return [{"type": "function", "function": {"name": str(t.get("name", "")),
                                              "description": str(t.get("description", "")),
                                              "parameters": _parameters(t)}} for t in tools]


def _assistant_blocks(messages: list[dict], kind: str):
    for message in messages:
        if message.get("role") == "assistant":
            yield from blocks_of(message, kind)


def has_reasoning(messages: list[dict]) -> bool:
    """True when any assistant turn shows reasoning: a non-empty ``thinking``
    block, or text containing one of :data:`REASONING_MARKERS` (batch output
    discards samples without reasoning: :mod:`batch.trajectories`)."""
    if any(str(b.get("thinking", "")).strip() for b in _assistant_blocks(messages, "thinking")):
        return True
    texts = (str(b.get("text", "")) for b in _assistant_blocks(messages, "text"))
    return any(marker in text for text in texts for marker in REASONING_MARKERS)


def tool_calls_in(messages: list[dict]) -> list[str]:
    """The names of every tool the model called, in order, repeats and unknown
    names included (the batch filter drops runs that call a tool they were not offered)."""
    return [str(b.get("name", "")) for b in _assistant_blocks(messages, "tool_use")]


def tool_stats(messages: list[dict], offered: list[str] | tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
    """``{tool: {"count", "success", "failure"}}`` for every known tool (zeros
    included, so every line has the same keys), and for each tool of ``offered`` besides
    (a job's own: its MCP servers' ``mcp__NAME__TOOL``).

    A call counts as a failure when its result has ``is_error`` or never came
    (the run stopped first).  Calls to unknown tool names are not counted here
    (see :func:`tool_calls_in`).
    """
    stats = {name: {"count": 0, "success": 0, "failure": 0} for name in (*known_tool_names(), *offered)}
    failed = {str(b.get("tool_use_id", "")): bool(b.get("is_error"))
              for message in messages for b in blocks_of(message, "tool_result")}
    for block in _assistant_blocks(messages, "tool_use"):
        if block.get("name") in stats:
            entry = stats[block["name"]]
            entry["count"] += 1
            entry["failure" if failed.get(str(block.get("id", "")), True) else "success"] += 1
    return stats
