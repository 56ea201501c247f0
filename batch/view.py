"""The model-neutral view of a run: ``messages.jsonl``, the folder's default config.

What trainers read as it is: TRL's ``SFTTrainer`` and axolotl's ``chat_template``
take ``messages`` (roles system/user/assistant/tool, structured ``tool_calls``,
``reasoning_content``) and ``tools``; TRL reads a ``tools`` that is JSON text
with ``json.loads`` (``trl.trainer.sft_trainer``), which is what it is here.
``hermes_messages`` is Hermes' rendering of the same turns as plain chat messages
(tool definitions inside the system text), for loaders that render ``messages``
without ``tools=`` (Atropos' SFT loader).  There is no ``conversations`` key: TRL prefers it over ``messages`` and keeps its
roles ``human``/``gpt``, so a folder holding both trains on the wrong text.
Hermes' full lines stay in ``trajectories.jsonl`` and the batch files (the
card's named configs ``hermes`` and ``batches``).

Every key has a plain type (no ``datasets.Json``, which ``datasets`` has only
since 4.7): what varies by tool or dataset (``tools``, ``metadata.fields``) is JSON
text, so views of runs with different tools, with and without tool calls, and of
any hermesd version load with one schema on every ``datasets`` release from 3.0.

Written at the end of a run from the lines of ``trajectories.jsonl``, each line
becoming one (:func:`view_of`, built from the declaration :data:`VIEW`), in the same order.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterator

from batch import files
from batch.line import LINE, Key, ListOf, build, feature

NAME = "messages.jsonl"

ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
"""Hermes' ShareGPT speakers as chat roles."""

_LINE = {key.name: key for key in LINE}


def _kept(name: str, value: Any = None) -> Key:
    """The trajectory line's key ``name`` as it is (its type and meaning), its value read from
    the line (``value(line)``; default: the line's value of that name)."""
    return dataclasses.replace(_LINE[name], value=value or (lambda line: line.get(name)))


def _meta(name: str, type_: str) -> Key:
    """A key of the view's ``metadata``: the trajectory line's metadata value of that name."""
    return Key(name, type_, value=lambda line: (line.get("metadata") or {}).get(name))


def _text(value: Any, **options: Any) -> str:
    return json.dumps(value, ensure_ascii=False, **options)


def _message(m: dict[str, Any]) -> dict[str, Any]:
    calls = [{"id": str(c.get("id") or ""), "type": str(c.get("type") or "function"),
              "function": {"name": str((c.get("function") or {}).get("name") or ""),
                           "arguments": str((c.get("function") or {}).get("arguments") or "")}}
             for c in m.get("tool_calls") or []]
    return {"role": str(m.get("role") or ""), "content": str(m.get("content") or ""),
            "reasoning_content": str(m.get("reasoning_content") or ""), "tool_calls": calls,
            "tool_call_id": str(m.get("tool_call_id") or ""), "name": str(m.get("name") or "")}


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _passed(line: dict[str, Any]) -> bool | None:
    passed = (line.get("verifier") or {}).get("passed")
    return passed if isinstance(passed, bool) else None


VIEW: tuple[Key, ...] = (
    _kept("messages", lambda line: [_message(m) for m in line.get("messages") or []]),
    Key("tools", "string", "The tools offered: a JSON list of OpenAI function schemas, as text.",
        lambda line: _text(line.get("tools") or [])),
    _kept("prompt_index"),
    _kept("group_id", lambda line: line.get("group_id", line.get("prompt_index"))),
    _kept("attempt"),
    _kept("reward", lambda line: _number(line.get("reward"))),
    Key("passed", "bool?", "Whether the verifier passed it (null: no verdict).", _passed),
    _kept("completed"), _kept("partial"),
    Key("hermes_messages", ListOf((Key("role", "string"), Key("content", "string"))),
        "Hermes' turns as plain chat messages (system, user, assistant, tool), each its text as Hermes renders "
        "it: the tool definitions in the system text (`<tools>`), reasoning in `<think>`, calls as `<tool_call>`, "
        "results in `<tool_response>` — for loaders that render `messages` without `tools=` (Atropos' SFT "
        "loader with `dataset_format: oai_format`).",
        lambda line: [{"role": ROLES.get(str(t.get("from")), str(t.get("from") or "")),
                       "content": str(t.get("value") or "")} for t in line.get("conversations") or []]),
    Key("metadata", (*(_meta(name, type_) for name, type_ in (
        ("run_name", "string"), ("job", "string"), ("model", "string"), ("provider", "string"),
        ("exit_reason", "string"), ("synthetic", "bool"))),
        Key("api_calls", "int64", value=lambda line: line.get("api_calls")),
        Key("fields", "string", value=lambda line: _text((line.get("metadata") or {}).get("extra") or {},
                                                          sort_keys=True))),
        "Where it came from; ``fields``: the dataset line's other fields as JSON text."),
)
"""The keys of a view line, in order, each with where its value comes from in a trajectory
line: the view is built from this declaration (:func:`view_of`), as the line is from
:data:`batch.line.LINE`; a new key of the view is a key here."""


def features() -> list[dict[str, Any]]:
    """The view's features in the card's YAML form (:mod:`batch.card`)."""
    return [feature(k) for k in VIEW]


def view_of(line: dict[str, Any]) -> dict[str, Any]:
    """The view line of trajectory line ``line``: every key of :data:`VIEW`, in order."""
    return build(line, VIEW)


def write(run_dir: Path, trajectories: Path) -> int:
    """Write ``RUN_DIR/messages.jsonl``: the view of every line of ``trajectories`` (a
    ``trajectories.jsonl``), in order; returns how many.  Atomic; raises ``OSError``."""
    count = 0

    def lines() -> Iterator[bytes]:
        nonlocal count
        with open(trajectories, "rb") as fh:
            for raw in fh:
                if raw.strip():
                    count += 1
                    yield (files.dumps(view_of(json.loads(raw))) + "\n").encode("utf-8")

    files.write_atomic(run_dir / NAME, lines())
    return count
