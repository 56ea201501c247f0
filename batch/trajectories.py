"""What a batch run writes: trajectory lines, batch files, the merged ``trajectories.jsonl``.

A trajectory line — the same in ``batch_N.jsonl`` and in ``trajectories.jsonl`` —
is declared once, key by key with its type and meaning, in :data:`batch.line.LINE`
(the keys are listed in ``docs/protocol.md``); :func:`batch.line.build_line` writes it.

Prompt ``i`` goes to ``batch_{i // batch_size}.jsonl``.  The merge keeps the
first line of each prompt index and leaves out (counted by reason, see
:data:`FILTER_REASONS`) lines that call a tool the sample was not offered or
hold a ``<tool_call>`` that does not parse, synthetic samples unless the run
allows them, partial samples when the run excludes them, and samples whose
reward is below the run's ``--min_reward`` (or that have none) when it has one.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from batch import files
from hermesd.contract.toolsets import MCP_TOOL, TOOL_NAMES

KNOWN_TOOLS: tuple[str, ...] = TOOL_NAMES
"""Every tool a child can have, sorted (:data:`hermesd.contract.toolsets.TOOL_NAMES`, which the child's
registry checks itself against): the valid tool list of the filter and the keys of ``tool_stats``."""

REASONING_MARKERS = ("<REASONING_SCRATCHPAD>",)
"""Text that shows reasoning in a ``gpt`` turn (Hermes' rule: a scratchpad or native
thinking); a ``<think>`` block counts when it is not empty (every turn has one)."""

REASONING_WORDS = 2
"""Least words (whitespace-separated pieces holding a letter) of a reasoning trace that counts:
``...``, ``False`` or a lone identifier is what a grammar forced, not reasoning."""

DISCARD_REASONS = ("invalid_tool_calls", "no_reasoning")
"""Why a sample is discarded (never written), in the order they are checked: it stopped
after invalid tool calls (a tool not offered, arguments that are no JSON object) and
kept no reasoning; it shows no reasoning."""

FILTER_REASONS = ("tool_not_offered", "unparseable_tool_call", "synthetic", "partial", "below_min_reward")
"""Why a written line is left out of ``trajectories.jsonl``, in the order they are checked."""

TRAJECTORIES = "trajectories.jsonl"
_BATCH_FILE = re.compile(r"^batch_(\d+)\.jsonl$")
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_SCRATCHPAD = re.compile(r"<REASONING_SCRATCHPAD>(.*?)(?:</REASONING_SCRATCHPAD>|$)", re.S)


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


def tool_stats(trace: list[dict[str, Any]], offered: list[str] | tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
    """``{tool: {count, success, failure}}`` for every tool of :data:`KNOWN_TOOLS` and of ``offered``
    (the sample's own: its MCP servers' ``mcp__NAME__TOOL``), from a child's tool trace
    (``[{"name", "ok", "bytes", "seconds"}]``); other names are not counted."""
    stats = {name: {"count": 0, "success": 0, "failure": 0}
             for name in (*KNOWN_TOOLS, *(n for n in offered if n.startswith(MCP_TOOL)))}
    for call in trace:
        entry = stats.get(str(call.get("name")))
        if entry is not None:
            entry["count"] += 1
            entry["success" if call.get("ok") else "failure"] += 1
    return stats


def tool_error_counts(stats: dict[str, dict[str, int]]) -> dict[str, int]:
    """Hermes' ``tool_error_counts``: ``{tool: failures}`` for every tool of ``stats``."""
    return {name: int(entry.get("failure") or 0) for name, entry in stats.items()}


def tool_usage(stats: dict[str, dict[str, int]], offered: list[str]) -> list[dict[str, Any]]:
    """``tool_stats`` as records ``[{"name", "count", "success", "failure"}]`` for the
    tools offered or used (sorted by name): the same counts in a schema that does not
    depend on which tools exist."""
    names = sorted({n for n in offered if n in stats} | {n for n, e in stats.items() if e.get("count")})
    return [{"name": n, **{k: int(stats[n].get(k) or 0) for k in ("count", "success", "failure")}} for n in names]


def gpt_turns(conversations: list[dict[str, Any]]) -> list[str]:
    """The values of the ``gpt`` turns of a conversation."""
    return [str(t.get("value", "")) for t in conversations if t.get("from") == "gpt"]


def real_reasoning(trace: str, copied: set[str]) -> bool:
    """True when ``trace`` is real text: at least :data:`REASONING_WORDS` words, and not one
    of the strings ``copied`` (the turn's tool-call arguments) nor a piece of one."""
    text = " ".join(trace.split())
    if sum(1 for word in text.split(" ") if any(ch.isalpha() for ch in word)) < REASONING_WORDS:
        return False
    return not any(text in " ".join(c.split()) for c in copied)


def _arguments(value: str) -> set[str]:
    """Every string among the arguments of the ``<tool_call>`` blocks of ``value``."""
    found: set[str] = set()

    def walk(item: Any) -> None:
        if isinstance(item, str):
            found.add(item)
        elif isinstance(item, dict):
            for v in item.values():
                walk(v)
        elif isinstance(item, list):
            for v in item:
                walk(v)

    for body in _TOOL_CALL.findall(value):
        try:
            walk((json.loads(body) or {}).get("arguments"))
        except (json.JSONDecodeError, AttributeError):
            continue
    return found


def shows_reasoning(value: str) -> bool:
    """True when a ``gpt`` turn's value holds a reasoning trace — in a ``<think>`` block or
    after one of :data:`REASONING_MARKERS` (Hermes' rule) — that is real text
    (:func:`real_reasoning`: not punctuation, a lone word, or a copy of a tool-call argument)."""
    traces = _THINK.findall(value) + _SCRATCHPAD.findall(value)
    if not traces:
        return False
    copied = _arguments(value)
    return any(real_reasoning(t, copied) for t in traces)


def has_reasoning(conversations: list[dict[str, Any]]) -> bool:
    """True when any ``gpt`` turn shows reasoning (samples without are discarded)."""
    return any(shows_reasoning(v) for v in gpt_turns(conversations))


def tool_calls(conversations: list[dict[str, Any]]) -> tuple[list[str], int]:
    """``(names, unparseable)``: the names of every ``<tool_call>`` in the ``gpt``
    turns, in order, and how many calls do not parse (not a JSON object with a
    string ``name`` and an object ``arguments``)."""
    names, unparseable = [], 0
    for value in gpt_turns(conversations):
        for body in _TOOL_CALL.findall(value):
            try:
                call = json.loads(body)
            except json.JSONDecodeError:
                unparseable += 1
                continue
            if isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict):
                names.append(call["name"])
            else:
                unparseable += 1
    return names, unparseable


def offered_tools(line: dict[str, Any]) -> list[str]:
    """The names of the tools a line's sample was offered (its ``tools``; every
    known tool for a line written before hermesd recorded them)."""
    tools = line.get("tools")
    if not isinstance(tools, list):
        return list(KNOWN_TOOLS)
    return [str((t.get("function") or {}).get("name", "")) for t in tools if isinstance(t, dict)]


def filter_reason(line: dict[str, Any], **filters: Any) -> tuple[str, list[str]] | None:
    """Why ``line`` stays out of ``trajectories.jsonl`` — ``(reason, detail)`` with a
    reason of :data:`FILTER_REASONS` (detail: the tool names not offered) — or None;
    ``filters``: those of :meth:`Written.reason`."""
    return written_at(line, 0, 0, 0).reason(**filters)


@dataclass(frozen=True, slots=True)
class Written:
    """A line of a batch file without its text: where it is (batch file ``number``, byte
    range ``start``–``end``, newline included) and what :meth:`reason` needs of it."""

    number: int
    start: int
    end: int
    not_offered: tuple[str, ...]
    unparseable: int
    synthetic: bool
    partial: bool
    reward: float | None = None

    def reason(self, *, allow_synthetic: bool = False, exclude_partial: bool = False,
               min_reward: float | None = None) -> tuple[str, list[str]] | None:
        """See :func:`filter_reason` (``min_reward`` None: no reward filter)."""
        if self.not_offered:
            return "tool_not_offered", list(self.not_offered)
        if self.unparseable:
            return "unparseable_tool_call", []
        if self.synthetic and not allow_synthetic:
            return "synthetic", []
        if self.partial and exclude_partial:
            return "partial", []
        if min_reward is not None and (self.reward is None or self.reward < min_reward):
            return "below_min_reward", []
        return None


def written_at(line: dict[str, Any], number: int, start: int, end: int) -> Written:
    """The :class:`Written` of ``line``, found in batch file ``number`` at ``start``–``end``."""
    names, unparseable = tool_calls(line.get("conversations") or [])
    reward = line.get("reward")
    return Written(number, start, end, tuple(sorted(set(names) - set(offered_tools(line)))), unparseable,
                   bool((line.get("metadata") or {}).get("synthetic")), bool(line.get("partial")),
                   float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None)


def read_lines(run_dir: Path, *, repair: bool = False) -> tuple[list[tuple[int, dict[str, Any], Written]], list[str]]:
    """Every prompt's line from the run's batch files — ``(prompt index, line, where)``,
    the first one when an index repeats — and the problems met (torn tails, truncated
    with ``repair``; bad lines; repeated indices)."""
    lines: list[tuple[int, dict[str, Any], Written]] = []
    seen: set[int] = set()
    problems: list[str] = []
    for number, path in batch_files(run_dir):
        entries, found = files.read_spans(path, repair=repair)
        problems += found
        for entry, start, end in entries:
            index = entry.get("prompt_index")
            if not isinstance(index, int):
                problems.append(f"{path}: a line without an integer prompt_index; skipped")
            elif index in seen:
                problems.append(f"{path}: prompt_index {index} appears again; the first line is kept")
            else:
                seen.add(index)
                lines.append((index, entry, written_at(entry, number, start, end)))
    return lines, problems


@dataclass
class Merged:
    """The outcome of :func:`merge`: the prompt indices kept and those left out,
    ``{index: {"reason": one of FILTER_REASONS, "tools": [names]}}``."""

    kept: list[int] = field(default_factory=list)
    filtered: dict[int, dict[str, Any]] = field(default_factory=dict)

    def count(self, reason: str) -> int:
        """How many lines were left out for ``reason``."""
        return sum(1 for f in self.filtered.values() if f["reason"] == reason)


def merge(run_dir: Path, written: dict[int, Written], **filters: Any) -> Merged:
    """Write ``RUN_DIR/trajectories.jsonl`` from the lines ``written`` (prompt index →
    where), ordered by index, without the lines :meth:`Written.reason` names (with
    ``filters``, its keywords).  The lines are copied as the batch files hold them, not
    parsed again (a batch file is read once).  Atomic; raises ``OSError``."""
    merged = Merged()
    for index in sorted(written):
        why = written[index].reason(**filters)
        if why:
            merged.filtered[index] = {"reason": why[0], "tools": why[1]}
        else:
            merged.kept.append(index)
    with contextlib.ExitStack() as stack:
        sources = {number: stack.enter_context(open(batch_file(run_dir, number), "rb"))
                   for number in {written[i].number for i in merged.kept}}

        def copied() -> Iterator[bytes]:
            for w in (written[i] for i in merged.kept):
                source = sources[w.number]
                source.seek(w.start)
                yield source.read(w.end - w.start)

        files.write_atomic(run_dir / TRAJECTORIES, copied())
    return merged
