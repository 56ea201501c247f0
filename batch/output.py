"""What a batch run writes: trajectory lines, batch files, the merged ``trajectories.jsonl``.

A trajectory line (SPEC §6) — the same in ``batch_N.jsonl`` and in
``trajectories.jsonl``, and always of one schema, so the Hugging Face
``datasets`` JSON loader reads the file with one consistent set of columns::

    {"prompt_index": int,
     "conversations": [{"from": "system"|"human"|"gpt"|"tool", "value": str}, ...],
     "metadata": {"batch": int, "run_name": str, "job": str, "model": str,
                  "provider": str, "distribution": str, "started_at": str,
                  "completed_at": str, "duration_seconds": float,
                  "exit_reason": str, "synthetic": bool,
                  "tokens": {"input": int, "output": int}},
     "completed": bool, "partial": bool, "api_calls": int,
     "toolsets_used": [str],
     "tool_stats": {tool: {"count": int, "success": int, "failure": int}}}

Every value keeps its type on every line (strings are ``""`` rather than null)
and ``tool_stats`` has every tool of :data:`KNOWN_TOOLS`, zeros included.  The
conversations come from the child (``child.trajectory``: reasoning as
``<think>…</think>``, calls as ``<tool_call>`` JSON, results as
``<tool_response>`` JSON); this module only writes, merges, filters and counts.

Prompt ``i`` goes to ``batch_{i // batch_size}.jsonl``.  The merge keeps the
first line of each prompt index and leaves out lines that call a tool name
outside :data:`KNOWN_TOOLS` (hallucinated tools).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batch import files

KNOWN_TOOLS: tuple[str, ...] = (
    "delegate_task", "kanban_block", "kanban_comment", "kanban_complete", "kanban_create", "kanban_heartbeat",
    "kanban_link", "kanban_list", "kanban_my_task", "kanban_show", "kanban_unblock", "list_files", "patch_file",
    "read_file", "spawn_agent", "spawn_parallel", "terminal", "web_extract", "web_search", "write_file",
)
"""Every tool a child can have, sorted: the valid tool list of the filter and the
keys of ``tool_stats``.  Kept equal to ``child.tools.registry.known_tool_names()``
(the daemon side does not import ``child/``; a test checks they agree)."""

REASONING_MARKERS = ("<think>", "<REASONING_SCRATCHPAD>")
"""A ``gpt`` turn containing one of these shows reasoning."""

TRAJECTORIES = "trajectories.jsonl"
_BATCH_FILE = re.compile(r"^batch_(\d+)\.jsonl$")
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def batch_file(run_dir: Path, number: int) -> Path:
    """``RUN_DIR/batch_N.jsonl``."""
    return run_dir / f"batch_{number}.jsonl"


def batch_files(run_dir: Path) -> list[tuple[int, Path]]:
    """The batch files of a run as ``(N, path)``, by number."""
    found = []
    for path in run_dir.glob("batch_*.jsonl"):
        match = _BATCH_FILE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def tool_stats(trace: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{tool: {count, success, failure}}`` for every tool of :data:`KNOWN_TOOLS`,
    from a child's tool trace (``[{"name", "ok", "bytes"}]``); unknown names are not counted."""
    stats = {name: {"count": 0, "success": 0, "failure": 0} for name in KNOWN_TOOLS}
    for call in trace:
        entry = stats.get(str(call.get("name")))
        if entry is not None:
            entry["count"] += 1
            entry["success" if call.get("ok") else "failure"] += 1
    return stats


def gpt_turns(conversations: list[dict[str, Any]]) -> list[str]:
    """The values of the ``gpt`` turns of a conversation."""
    return [str(t.get("value", "")) for t in conversations if t.get("from") == "gpt"]


def shows_reasoning(value: str) -> bool:
    """True when a ``gpt`` turn's value contains one of :data:`REASONING_MARKERS`."""
    return any(marker in value for marker in REASONING_MARKERS)


def has_reasoning(conversations: list[dict[str, Any]]) -> bool:
    """True when any ``gpt`` turn shows reasoning (samples without are discarded)."""
    return any(shows_reasoning(v) for v in gpt_turns(conversations))


def called_tools(conversations: list[dict[str, Any]]) -> list[str]:
    """Names of every ``<tool_call>`` in the ``gpt`` turns, in order (calls whose
    JSON does not parse or has no name are skipped)."""
    names = []
    for value in gpt_turns(conversations):
        for body in _TOOL_CALL.findall(value):
            try:
                call = json.loads(body)
            except json.JSONDecodeError:
                continue
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                names.append(call["name"])
    return names


def invalid_tools(line: dict[str, Any]) -> list[str]:
    """Tool names a line calls that are not in :data:`KNOWN_TOOLS` (sorted, unique)."""
    return sorted(set(called_tools(line.get("conversations") or [])) - set(KNOWN_TOOLS))


def build_line(*, index: int, batch: int, conversations: list[dict[str, Any]], completed: bool, partial: bool,
               api_calls: int, toolsets: list[str], trace: list[dict[str, Any]],
               metadata: dict[str, Any]) -> dict[str, Any]:
    """One trajectory line (see the module doc); ``metadata`` holds the keys after
    ``batch`` (missing strings become ``""``, numbers ``0``)."""
    tokens = metadata.get("tokens") or {}
    meta = {"batch": int(batch)}
    for key in ("run_name", "job", "model", "provider", "distribution", "started_at", "completed_at"):
        meta[key] = str(metadata.get(key) or "")
    meta["duration_seconds"] = float(metadata.get("duration_seconds") or 0.0)
    meta["exit_reason"] = str(metadata.get("exit_reason") or "")
    meta["synthetic"] = bool(metadata.get("synthetic"))
    meta["tokens"] = {"input": int(tokens.get("input") or 0), "output": int(tokens.get("output") or 0)}
    turns = [{"from": str(t.get("from", "")), "value": str(t.get("value", ""))} for t in conversations]
    return {"prompt_index": int(index), "conversations": turns, "metadata": meta, "completed": bool(completed),
            "partial": bool(partial), "api_calls": int(api_calls), "toolsets_used": [str(t) for t in toolsets],
            "tool_stats": tool_stats(trace)}


def load_lines(run_dir: Path, *, repair: bool = False) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Every prompt's line from the run's batch files (the first one when an index
    repeats) and the problems met (torn tails — truncated with ``repair`` — bad
    lines, repeated indices)."""
    lines: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for _number, path in batch_files(run_dir):
        entries, found = files.read_jsonl(path, repair=repair)
        problems += found
        for entry in entries:
            index = entry.get("prompt_index")
            if not isinstance(index, int):
                problems.append(f"{path}: a line without an integer prompt_index; skipped")
            elif index in lines:
                problems.append(f"{path}: prompt_index {index} appears again; the first line is kept")
            else:
                lines[index] = entry
    return lines, problems


@dataclass
class Merged:
    """The outcome of :func:`merge`: the lines kept (by prompt index) and the
    indices filtered out for calling unknown tools (``{index: [names]}``)."""

    kept: list[dict[str, Any]] = field(default_factory=list)
    filtered: dict[int, list[str]] = field(default_factory=dict)


def merge(run_dir: Path, lines: dict[int, dict[str, Any]]) -> Merged:
    """Write ``RUN_DIR/trajectories.jsonl`` from ``lines`` (prompt index → line),
    ordered by index, without the lines that call unknown tools.  Atomic; raises ``OSError``."""
    merged = Merged()
    for index in sorted(lines):
        bad = invalid_tools(lines[index])
        if bad:
            merged.filtered[index] = bad
        else:
            merged.kept.append(lines[index])
    files.write_atomic(run_dir / TRAJECTORIES, "".join(files.dumps(line) + "\n" for line in merged.kept))
    return merged
