"""A job's conversation as the page shows it: turns of blocks (thinking, text, tool calls with their
arguments and results), from its journal (``journal`` op, :mod:`hermesd.journal`: the internal
Anthropic-style content blocks of ``child.messages``) or, for a job that kept none, from its
recorded trajectory (``result`` with ``trajectory``: OpenAI-style ``messages``, ``child.trajectory``)."""

from __future__ import annotations

import json
from typing import Any

FOLD_CHARS = 600
"""Text longer than this is shown folded (``<details>``), its start as the summary."""


def block(kind: str, text: str, **extra: Any) -> dict[str, Any]:
    """One block to show: ``kind`` (``text``, ``thinking``, ``call``, ``result``, ``note``), its text,
    whether it is long enough to fold, and ``extra`` (a call's ``name`` and ``id``; a result's ``error``)."""
    return {"kind": kind, "text": text, "fold": len(text) > FOLD_CHARS or text.count("\n") > 12, **extra}


def as_text(value: Any) -> str:
    """A tool's arguments or a result's content as readable text (JSON indented)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in value):
        return "\n".join(str(b.get("text") or "") for b in value)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def from_journal(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns ``[{role, blocks}]`` from journal entries; each tool result follows its call."""
    turns: list[dict[str, Any]] = []
    for entry in entries:
        t = entry.get("t")
        if t == "message":
            message = entry.get("message") or {}
            content = message.get("content")
            content = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            blocks = []
            for b in content:
                kind = b.get("type")
                if kind == "text" and b.get("text"):
                    blocks.append(block("text", b["text"]))
                elif kind == "thinking" and b.get("thinking"):
                    blocks.append(block("thinking", b["thinking"]))
                elif kind == "tool_use":
                    blocks.append(block("call", as_text(b.get("input")), name=b.get("name"), id=b.get("id")))
                elif kind == "tool_result":
                    blocks.append(block("result", as_text(b.get("content")), error=bool(b.get("is_error"))))
            turns.append({"role": message.get("role") or "?", "blocks": blocks, "turn": entry.get("turn")})
        elif t == "tool_result":
            result = entry.get("result") or {}
            name = (entry.get("trace") or {}).get("name")
            turns.append({"role": "tool", "blocks": [block("result", as_text(result.get("content")), name=name,
                                                           error=bool(result.get("is_error")))]})
        elif t == "tool_started":
            turns.append({"role": "tool", "blocks": [block("note", f"running {entry.get('name')}…")],
                          "running": entry.get("id")})
        elif t == "note":
            turns.append({"role": "user", "blocks": [block("note", str((entry.get("block") or {}).get("text") or ""))]})
    done = {i for i, turn in enumerate(turns) if turn.get("running")
            and any(later["role"] == "tool" and not later.get("running") for later in turns[i + 1:])}
    return [turn for i, turn in enumerate(turns) if i not in done]


def from_trajectory(trajectory: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Turns from a recorded trajectory's model-neutral ``messages`` (roles system, user,
    assistant, tool; an assistant's ``tool_calls`` with JSON ``arguments``)."""
    turns = []
    for message in (trajectory or {}).get("messages") or []:
        role = message.get("role") or "?"
        blocks = []
        if message.get("reasoning") or message.get("reasoning_content"):
            blocks.append(block("thinking", str(message.get("reasoning") or message.get("reasoning_content"))))
        content = message.get("content")
        if content:
            blocks.append(block("result" if role == "tool" else "text", as_text(content)))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError:
                pass
            blocks.append(block("call", as_text(arguments), name=function.get("name"), id=call.get("id")))
        turns.append({"role": role, "blocks": blocks})
    return turns
