"""``statistics.json``: the counts of a whole batch run, resumed parts included.

Counted from the files, so a run resumed after a crash reports exactly what its
files hold: a :class:`Tally` of the batch files' lines is read from them when the
run opens, then each line is added as it is written (fsynced) — the end of a run
need not read its files again:

* the batch files (every written line: completed or partial samples) give the
  per-tool counts, success and failure rates, API calls, tokens, per-prompt
  durations, toolsets and reasoning per assistant turn;
* the checkpoint gives the discarded (no reasoning) and failed prompts, whose
  API calls and tokens count too (they were spent), and the run's active time;
* the merge gives the lines filtered out for calling unknown tools.

Shape — the keys of Hermes Agent's batch_runner.py ``statistics.json`` first,
with its meanings (rates there are percentages with 2 decimals, over the calls
with a result; tools that were never called are left out), then hermesd's::

    {"run_name", "distribution", "total_prompts", "total_batches", "batch_size", "model",
     "completed_at", "duration_seconds",
     "tool_statistics": {tool: {"count", "success", "failure", "success_rate", "failure_rate"}},
     "reasoning_statistics": {"total_assistant_turns", "turns_with_reasoning", "turns_without_reasoning"},
     "job", "dataset_file", "model", "distribution", "batch_size", "generated_at",
     "prompts": {"total", "bad_lines", "written", "completed", "partial", "incomplete",
                 "discarded_no_reasoning", "discarded_invalid_tool_calls", "filtered_invalid_tools", "filtered_tool_not_offered",
                 "filtered_unparseable_tool_call", "filtered_synthetic", "filtered_partial",
                 "in_trajectories", "failed", "pending"},
     "filtered": {"INDEX": {"reason", "tools"}},
     "tool_stats": {tool: {"count", "success", "failure", "success_rate", "failure_rate"}},
     "tool_calls": {"total", "success", "failure", "success_rate"},
     "reasoning": {"samples_with_reasoning", "samples_without_reasoning", "coverage",
                   "assistant_turns", "assistant_turns_with_reasoning", "turn_coverage"},
     "tokens": {"input", "output", "total"}, "api_calls": int,
     "duration": {"wall_seconds", "prompt_seconds_total", "prompt_seconds_mean"},
     "toolsets_used": {toolset: samples},
     "rewards": {"verified", "rewarded", "mean", "passed", "pass_rate", "verifier_errors"},
     "groups": {"samples_per_prompt", "groups", "pass@1", "pass@k"},
     "cost_usd", "cost_unknown",
     "usage": {"calls", "input", "output", "cache_write", "cache_read", "tokens", "cost_usd", "cost_unknown"}}

``usage`` is what the bill (``hermesd.billing``) counted of the run's model calls, every
attempt of every prompt (failed ones too); ``cost_usd`` is its cost where the models had a
price, ``cost_unknown`` true when some had none.

``rewards`` counts the samples a verifier judged (``batch.verify``), written or
discarded: ``verified`` (it ran), ``rewarded`` (it gave a reward; ``mean`` is
theirs, None when none), ``passed`` and ``pass_rate`` (of those with a verdict),
``verifier_errors`` (it failed or timed out).  ``groups``: pass@1 and pass@k of
the run's groups (``batch.groups.summary``, k = ``samples_per_prompt``).

hermesd's rates are fractions in [0, 1] (0.0 when nothing was counted).
``partial`` counts Hermes' partial samples (stopped for invalid tool calls),
``incomplete`` every written sample without a final answer (``completed`` false).
The Hermes totals cover the whole run, resumed parts included.  ``model`` is the
run's ``--model``, else the models its lines were made with (most used first).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from batch import groups, trajectories
from batch.checkpoint import Checkpoint
from hermesd import clock
from hermesd.contract.toolsets import MCP_TOOL


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


class Tally:
    """The counts of the batch files' lines (:meth:`add` each line once): written,
    completed, partial, assistant turns and those with reasoning, samples with reasoning,
    per-tool calls, tokens, API calls, prompt seconds, models and toolsets."""

    def __init__(self) -> None:
        self.written = self.completed = self.partial = self.turns = self.turns_with_reasoning = 0
        self.samples_with_reasoning = self.api_calls = 0
        self.tools = {name: Counter() for name in trajectories.KNOWN_TOOLS}
        self.tokens: Counter = Counter()
        self.seconds = 0.0
        self.models: Counter = Counter()
        self.toolsets: Counter = Counter()
        self.verdicts = Verdicts()

    def add(self, line: dict[str, Any]) -> None:
        """Count one batch-file line."""
        meta = line.get("metadata") or {}
        turns = trajectories.gpt_turns(line.get("conversations") or [])
        reasoning = sum(1 for v in turns if trajectories.shows_reasoning(v))
        self.written += 1
        self.completed += bool(line.get("completed"))
        self.partial += bool(line.get("partial"))
        self.turns += len(turns)
        self.turns_with_reasoning += reasoning
        self.samples_with_reasoning += reasoning > 0
        for name, entry in (line.get("tool_stats") or {}).items():
            if name in self.tools or name.startswith(MCP_TOOL):  # an MCP tool counts from its first sample
                self.tools.setdefault(name, Counter()).update({k: int(entry.get(k) or 0) for k in ("count", "success", "failure")})
        self.tokens.update({k: int((meta.get("tokens") or {}).get(k) or 0) for k in ("input", "output")})
        self.api_calls += int(line.get("api_calls") or 0)
        self.seconds += float(meta.get("duration_seconds") or 0.0)
        self.models[meta.get("model")] += 1
        self.toolsets.update(line.get("toolsets_used") or [])
        verifier = line.get("verifier")
        if isinstance(verifier, dict):
            self.verdicts.add(int(line.get("group_id", line.get("prompt_index")) or 0), line.get("reward"),
                              verifier.get("passed"), bool(verifier.get("error")))


class Verdicts:
    """The verifiers' verdicts of a run's samples (:meth:`add` each judged sample once):
    how many were judged, rewarded (and the rewards' sum), passed, failed to verify, and
    each group's list of pass/fail."""

    def __init__(self) -> None:
        self.verified = self.rewarded = self.passed = self.judged = self.errors = 0
        self.reward_sum = 0.0
        self.groups: dict[int, list[bool]] = {}

    def add(self, group: int, reward: Any, passed: Any, error: bool) -> None:
        """Count one judged sample of ``group``: its ``reward`` (a number, or None) and
        ``passed`` (a bool, or None when the verifier gave no verdict)."""
        self.verified += 1
        self.errors += error
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            self.rewarded += 1
            self.reward_sum += float(reward)
        if isinstance(passed, bool):
            self.judged += 1
            self.passed += passed
            self.groups.setdefault(group, []).append(passed)

    def merged(self, other: "Verdicts") -> "Verdicts":
        """The counts of both."""
        out = Verdicts()
        for name in ("verified", "rewarded", "passed", "judged", "errors", "reward_sum"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for source in (self.groups, other.groups):
            for group, passed in source.items():
                out.groups.setdefault(group, []).extend(passed)
        return out

    def rewards(self) -> dict[str, Any]:
        """``statistics.json``'s ``rewards`` (see the module doc)."""
        return {"verified": self.verified, "rewarded": self.rewarded,
                "mean": round(self.reward_sum / self.rewarded, 4) if self.rewarded else None,
                "passed": self.passed, "pass_rate": _rate(self.passed, self.judged), "verifier_errors": self.errors}


def verdicts(tally: Tally, checkpoint: Checkpoint) -> Verdicts:
    """The verdicts of every judged sample: the batch files' (``tally``) and the discarded
    ones' (their checkpoint records keep ``reward``, ``passed`` and ``group_id``)."""
    out = Verdicts()
    for index, record in checkpoint.discarded.items():
        if record.get("reward") is not None or record.get("passed") is not None:
            out.add(int(record.get("group_id", index)), record.get("reward"), record.get("passed"), False)
    return tally.verdicts.merged(out)


def _tools(tally: Tally) -> dict[str, dict[str, Any]]:
    return {name: {"count": c["count"], "success": c["success"], "failure": c["failure"],
                   "success_rate": _rate(c["success"], c["count"]), "failure_rate": _rate(c["failure"], c["count"])}
            for name, c in tally.tools.items()}


def _percent(part: int, whole: int) -> float:
    return round(part / whole * 100, 2) if whole else 0.0


def _hermes_tools(tools: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Hermes' ``tool_statistics``: the tools called, rates in percent of the calls with a result."""
    out = {}
    for name, t in tools.items():
        if t["count"]:
            answered = t["success"] + t["failure"]
            out[name] = {"count": t["count"], "success": t["success"], "failure": t["failure"],
                         "success_rate": _percent(t["success"], answered),
                         "failure_rate": _percent(t["failure"], answered)}
    return out


def _spent(tally: Tally, checkpoint: Checkpoint) -> tuple[Counter, int]:
    """Tokens and API calls of every attempt the files remember."""
    tokens, calls = Counter(tally.tokens), tally.api_calls
    for record in list(checkpoint.discarded.values()) + list(checkpoint.failed.values()):
        tokens.update({k: int((record.get("tokens") or {}).get(k) or 0) for k in ("input", "output")})
        calls += int(record.get("api_calls") or 0)
    return tokens, calls


def _models_used(tally: Tally) -> str:
    """The model(s) the written lines name, most used first, joined by ", " ("" when none)."""
    return ", ".join(m for m, _ in tally.models.most_common() if m)


def compute(*, settings: dict[str, Any], job: str, scope: set[int], bad_lines: int,
            tally: Tally, merged: trajectories.Merged, checkpoint: Checkpoint,
            usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The statistics document (see the module doc).

    ``scope``: the sample indices of the run (its usable dataset lines, times
    ``samples_per_prompt``);
    ``tally``: the counts of its batch-file lines; ``merged``: the result of
    :func:`batch.trajectories.merge`; ``checkpoint``: the run's checkpoint; ``usage``: what the
    run's model calls spent by the bill (``hermesd.billing``: every attempt, ``calls``,
    ``input``, ``output``, ``cache_write``, ``cache_read``, ``cost_usd``, ``cost_unknown``), shown as
    ``usage`` and ``cost_usd`` / ``cost_unknown`` beside Hermes' keys.
    """
    written, completed, turns, with_reasoning = tally.written, tally.completed, tally.turns, tally.turns_with_reasoning
    discarded = len(checkpoint.discarded)
    why = Counter(str(d.get("reason") or "no_reasoning") for d in checkpoint.discarded.values())
    tools = _tools(tally)
    calls = {k: sum(t[k] for t in tools.values()) for k in ("count", "success", "failure")}
    tokens, api_calls = _spent(tally, checkpoint)
    seconds = tally.seconds + sum(float(d.get("duration_seconds") or 0.0) for d in checkpoint.discarded.values())
    prompts_timed = written + discarded
    failed = set(checkpoint.failed) & scope
    samples_with = tally.samples_with_reasoning
    size = int(settings.get("batch_size") or 1)
    now = clock.now_iso()
    filtered = {f"filtered_{reason}": merged.count(reason) for reason in trajectories.FILTER_REASONS}
    judged = verdicts(tally, checkpoint)
    return {
        "run_name": settings.get("run_name"), "distribution": settings.get("distribution"),
        "total_prompts": len(scope), "total_batches": len({i // size for i in scope}),
        "batch_size": settings.get("batch_size"), "model": settings.get("model") or _models_used(tally),
        "completed_at": now, "duration_seconds": round(checkpoint.active_seconds, 2),
        "tool_statistics": _hermes_tools(tools),
        "reasoning_statistics": {"total_assistant_turns": turns, "turns_with_reasoning": with_reasoning,
                                 "turns_without_reasoning": turns - with_reasoning},
        "job": job, "dataset_file": settings.get("dataset_file"), "generated_at": now,
        "prompts": {"total": len(scope), "bad_lines": bad_lines, "written": written, "completed": completed,
                    "partial": tally.partial,
                    "incomplete": written - completed, "discarded_no_reasoning": why["no_reasoning"],
                    "discarded_invalid_tool_calls": why["invalid_tool_calls"],
                    "filtered_invalid_tools": filtered["filtered_tool_not_offered"]
                    + filtered["filtered_unparseable_tool_call"], **filtered,
                    "in_trajectories": len(merged.kept),
                    "failed": len(failed), "pending": len(scope - checkpoint.settled() - failed)},
        "filtered": {str(k): v for k, v in merged.filtered.items()},
        "tool_stats": tools,
        "tool_calls": {"total": calls["count"], "success": calls["success"], "failure": calls["failure"],
                       "success_rate": _rate(calls["success"], calls["count"])},
        "reasoning": {"samples_with_reasoning": samples_with,
                      "samples_without_reasoning": written - samples_with + discarded,
                      "coverage": _rate(samples_with, written + discarded),
                      "assistant_turns": turns, "assistant_turns_with_reasoning": with_reasoning,
                      "turn_coverage": _rate(with_reasoning, turns)},
        "tokens": {"input": tokens["input"], "output": tokens["output"], "total": tokens["input"] + tokens["output"]},
        "api_calls": api_calls,
        "duration": {"wall_seconds": round(checkpoint.active_seconds, 3),
                     "prompt_seconds_total": round(seconds, 3),
                     "prompt_seconds_mean": round(seconds / prompts_timed, 3) if prompts_timed else 0.0},
        "toolsets_used": dict(sorted(tally.toolsets.items())),
        "rewards": judged.rewards(),
        "groups": groups.summary(judged.groups, int(settings.get("samples_per_prompt") or 1)),
        **({"cost_usd": usage["cost_usd"], "cost_unknown": usage["cost_unknown"], "usage": usage} if usage else {}),
    }
