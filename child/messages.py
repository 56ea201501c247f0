"""The internal message format of a run, modelled on Anthropic content blocks.

A conversation is a plain list of messages ``{"role": "user"|"assistant",
"content": [block, ...]}``; it is what providers receive, what a session stores
and what :mod:`child.trajectory` turns into ShareGPT.  Blocks (the shapes of the
Anthropic Messages API, https://docs.anthropic.com/en/api/messages):

* ``{"type": "text", "text": str}``
* ``{"type": "thinking", "thinking": str, "signature": str}`` — sent back to the
  provider unchanged; ``signature`` is ``""`` when the model gave none
* ``{"type": "tool_use", "id": str, "name": str, "input": dict}``
* ``{"type": "tool_result", "tool_use_id": str, "content": str, "is_error": bool}``

Assistant messages hold text, thinking and tool_use blocks; user messages hold
text and tool_result blocks.  Every tool_use is answered by one tool_result in
the next user message.
"""

from __future__ import annotations

import uuid
from typing import Any

Block = dict[str, Any]
Message = dict[str, Any]

INVALID_JSON = "__invalid_json_arguments__"
"""Key of a tool_use ``input`` whose arguments arrived as text that is not a JSON
object (OpenAI-style providers): ``{INVALID_JSON: raw_text}``.  The agent loop
answers such a call with an error result instead of running the tool."""


def text(value: str) -> Block:
    """A text block."""
    return {"type": "text", "text": value}


def thinking(value: str, signature: str = "") -> Block:
    """A thinking block (the model's reasoning; ``signature`` as the provider sent it)."""
    return {"type": "thinking", "thinking": value, "signature": signature}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:  # noqa: A002
    """A tool_use block; ``id`` defaults to a fresh ``toolu_<hex>``."""
    return {"type": "tool_use", "id": id or new_tool_id(), "name": name, "input": input}


def tool_result(tool_use_id: str, content: str, is_error: bool = False) -> Block:
    """A tool_result block answering the tool_use ``tool_use_id``."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def user(*blocks: Block | str) -> Message:
    """A user message; plain strings become text blocks."""
    return {"role": "user", "content": [text(b) if isinstance(b, str) else b for b in blocks]}


def assistant(blocks: list[Block]) -> Message:
    """An assistant message with these content blocks."""
    return {"role": "assistant", "content": list(blocks)}


def new_tool_id() -> str:
    """A fresh tool-use id, ``toolu_`` and 24 hex digits."""
    return f"toolu_{uuid.uuid4().hex[:24]}"


def blocks_of(message: Message, kind: str) -> list[Block]:
    """The blocks of ``message`` whose ``type`` is ``kind``, in order."""
    content = message.get("content")
    if isinstance(content, str):  # tolerate plain-string content from stored history
        content = [text(content)]
    return [b for b in content or [] if isinstance(b, dict) and b.get("type") == kind]


def final_text(message: Message) -> str:
    """The text blocks of ``message`` joined with blank lines (thinking left out)."""
    return "\n\n".join(b["text"] for b in blocks_of(message, "text") if b.get("text"))


def tool_uses(message: Message) -> list[Block]:
    """The tool_use blocks of ``message``, in order."""
    return blocks_of(message, "tool_use")
