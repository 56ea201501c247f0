"""Groups of samples: several independent attempts of each prompt, and what is counted of them.

``--samples_per_prompt K`` makes each usable dataset line ``i`` K items — sample
``i * K + a`` for attempt ``a`` in ``[0, K)`` — so everything a run keys by index
(batch files, the checkpoint, resume, the filters) works on samples unchanged: each
attempt is settled once, none twice.  A trajectory line's ``prompt_index`` is then
the sample's index and ``group_id`` the dataset line's (with K = 1 both are the
line's index, as in Hermes' batch_runner).

pass@k is the unbiased estimator of Chen et al. 2021, "Evaluating Large Language
Models Trained on Code" (arXiv:2107.03374, section 2.1): with ``n`` verified
attempts of a problem of which ``c`` pass, ``pass@k = 1 - C(n - c, k) / C(n, k)``,
averaged over the problems.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

from batch import files, trajectories
from batch.dataset import Dataset

GROUPS = "groups.jsonl"
"""The run's groups for RL trainers (:func:`export`), written at its end when it has groups."""


def expand(dataset: Dataset, k: int) -> Dataset:
    """``dataset`` with each prompt as ``k`` samples (see the module doc); ``k`` = 1
    returns it as it is."""
    if k == 1:
        return dataset
    prompts = [dataclasses.replace(p, index=p.index * k + a, group=p.index, attempt=a)
               for p in dataset.prompts for a in range(k)]
    return Dataset(dataset.path, prompts, dataset.errors)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem with ``n`` attempts, ``c`` of them passing
    (Chen et al. 2021, in its numerically stable product form).  Raises ``ValueError``
    unless ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, not n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def summary(verdicts: dict[int, list[bool]], k: int) -> dict[str, Any]:
    """``{samples_per_prompt, groups, pass@1, pass@k}`` over ``verdicts`` (group id →
    whether each of its verified attempts passed): the mean over the groups with at
    least one verified attempt (pass@1) and with at least ``k`` (pass@k); None when
    no group qualifies."""
    scored = [v for v in verdicts.values() if v]
    full = [v for v in scored if len(v) >= k]
    return {"samples_per_prompt": k, "groups": len(scored),
            "pass@1": round(sum(pass_at_k(len(v), sum(v), 1) for v in scored) / len(scored), 4) if scored else None,
            "pass@k": round(sum(pass_at_k(len(v), sum(v), k) for v in full) / len(full), 4) if full else None}


def prompt_part(messages: list[dict[str, Any]]) -> int:
    """How many of a sample's ``messages`` are its prompt: the system messages and the
    first user message (what every attempt of a group shares)."""
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            return i + 1
    return len(messages)


def export(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group records for RL trainers, by ``group_id``, from trajectory lines (each with
    ``group_id``, ``prompt_index``, ``messages``, ``tools``, ``reward``):
    ``{group_id, prompt, tools, completions, rewards, passed, prompt_indices, metadata}``
    — ``prompt`` the shared messages (:func:`prompt_part`), ``completions`` each attempt's
    messages after them, ``rewards`` and ``passed`` each attempt's verdict (None: no
    verifier, or it failed), in attempt order; ``metadata`` the dataset line's fields."""
    groups: dict[int, dict[str, Any]] = {}
    for line in sorted(lines, key=lambda ln: int(ln.get("prompt_index") or 0)):
        gid = int(line.get("group_id", line.get("prompt_index")) or 0)
        messages = list(line.get("messages") or [])
        cut = prompt_part(messages)
        group = groups.setdefault(gid, {"group_id": gid, "prompt": messages[:cut], "tools": line.get("tools") or [],
                                        "completions": [], "rewards": [], "passed": [], "prompt_indices": [],
                                        "metadata": (line.get("metadata") or {}).get("extra") or {}})
        group["completions"].append(messages[cut:])
        group["rewards"].append(line.get("reward"))
        group["passed"].append((line.get("verifier") or {}).get("passed"))
        group["prompt_indices"].append(line.get("prompt_index"))
    return [groups[g] for g in sorted(groups)]


def write(run_dir: Path, filters: dict[str, Any]) -> int:
    """Write ``RUN_DIR/groups.jsonl``: :func:`export` of the batch files' lines that the
    ``filters`` (``batch.trajectories.Written.reason``) keep, but for the reward filter (an RL
    trainer wants the failed attempts too).  Returns the number of groups.  Atomic;
    raises ``OSError``."""
    lines, _ = trajectories.read_lines(run_dir)
    keep = {**filters, "min_reward": None}
    records = export(line for _, line, where in lines if where.reason(**keep) is None)
    files.write_atomic(run_dir / GROUPS, ((files.dumps(r) + "\n").encode("utf-8") for r in records))
    return len(records)
