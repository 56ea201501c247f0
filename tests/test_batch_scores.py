"""Verifier verdicts, pass@k, groups and their export, HumanEval's verifier — without a daemon."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batch import groups, trajectories
from batch.dataset import Dataset, Prompt
from child.verify import verdict
from tests.harness import DATA, ROOT

HUMANEVAL = ROOT / "batch" / "verifiers" / "humaneval.py"


def test_verdict_exit_status_or_the_last_json_line_with_a_reward():
    assert verdict("all good\n", 0) == {"exit_status": 0, "details": {}, "error": None, "passed": True, "reward": 1.0}
    assert verdict("", 3)["passed"] is False and verdict("", 3)["reward"] == 0.0
    said = verdict('{"reward": 0.1}\nlog\n{"reward": 0.25, "passed": true, "tests": 4}\ntrailing text\n', 1)
    assert (said["reward"], said["passed"], said["details"], said["error"]) == (0.25, True, {"tests": 4}, None)
    assert verdict('{"reward": 0.5}', 1)["passed"] is False  # no "passed": the exit status says
    assert verdict('{"no": 1}', 0)["reward"] == 1.0  # an object without reward is just output
    for bad in ('{"reward": "high"}', '{"reward": true}', '{"reward": NaN}'):
        out = verdict(bad, 0)
        assert out["reward"] is None and out["passed"] is None and "not a finite number" in out["error"]
    killed = verdict('{"reward": 1.0}', -9)
    assert killed["reward"] is None and "signal 9" in killed["error"]


def _brute_pass_at_k(results: list[bool], k: int) -> float:
    """The probability that k attempts drawn without replacement hold a passing one, by enumeration."""
    draws = list(itertools.combinations(results, k))
    return sum(any(d) for d in draws) / len(draws)


def test_pass_at_k_is_the_unbiased_estimator():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                results = [True] * c + [False] * (n - c)
                assert groups.pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(results, k))
    assert groups.pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="n=2, c=3"):
        groups.pass_at_k(2, 3, 1)
    s = groups.summary({0: [True, False, False, False], 1: [False] * 4, 2: [True] * 4, 3: []}, 4)
    assert s == {"samples_per_prompt": 4, "groups": 3, "pass@1": round((0.25 + 0 + 1) / 3, 4),
                 "pass@k": round(2 / 3, 4)}
    assert groups.summary({}, 2) == {"samples_per_prompt": 2, "groups": 0, "pass@1": None, "pass@k": None}


def test_expand_makes_k_samples_of_each_line_numbered_by_line_and_attempt():
    data = Dataset("/d.jsonl", [Prompt(index=0, line=1, prompt="a", group=0),
                                Prompt(index=2, line=3, prompt="b", group=2, extra={"task_id": "T"})], ["bad"])
    assert groups.expand(data, 1) is data
    out = groups.expand(data, 3)
    assert [(p.index, p.group, p.attempt, p.prompt) for p in out.prompts] == [
        (0, 0, 0, "a"), (1, 0, 1, "a"), (2, 0, 2, "a"), (6, 2, 0, "b"), (7, 2, 1, "b"), (8, 2, 2, "b")]
    assert out.prompts[3].extra == {"task_id": "T"} and out.errors == ["bad"]


def _line(index: int, group: int, reward: float | None, passed: bool | None, answer: str) -> dict:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "do it"},
                {"role": "assistant", "content": answer}]
    return {"prompt_index": index, "group_id": group, "messages": messages, "tools": [{"type": "function"}],
            "reward": reward, "verifier": None if passed is None else {"passed": passed},
            "metadata": {"extra": {"task_id": f"T{group}"}}}


def test_export_groups_prompt_completions_rewards():
    lines = [_line(3, 1, 0.0, False, "no"), _line(0, 0, 1.0, True, "yes"), _line(2, 1, 1.0, True, "yes!"),
             _line(1, 0, None, None, "?")]
    out = groups.export(lines)
    assert [g["group_id"] for g in out] == [0, 1]
    first = out[0]
    assert first["prompt"] == lines[1]["messages"][:2] and first["tools"] == [{"type": "function"}]
    assert first["completions"] == [[{"role": "assistant", "content": "yes"}], [{"role": "assistant", "content": "?"}]]
    assert (first["rewards"], first["passed"], first["prompt_indices"]) == ([1.0, None], [True, None], [0, 1])
    assert out[1]["rewards"] == [1.0, 0.0] and out[1]["metadata"] == {"task_id": "T1"}


def test_min_reward_filter_counts_missing_rewards_as_below():
    base = trajectories.Written(0, 0, 1, (), 0, False, False, 0.5)
    assert base.reason() is None and base.reason(min_reward=0.5) is None
    assert base.reason(min_reward=0.6) == ("below_min_reward", [])
    assert trajectories.Written(0, 0, 1, (), 0, False, False, None).reason(min_reward=0.0) == ("below_min_reward", [])
    assert trajectories.Written(0, 0, 1, (), 0, True, False, None).reason(min_reward=0.0) == ("synthetic", [])


def _humaneval(cwd: Path, *args: str, sample: dict | None = None) -> tuple[int, dict | None]:
    env = {**os.environ, "HERMES_SAMPLE": json.dumps(sample or {})}
    done = subprocess.run([sys.executable, str(HUMANEVAL), "--tests", str(DATA / "humaneval_tests.jsonl"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def test_humaneval_verifier_grades_solution_py(tmp_path):
    tests = [json.loads(x) for x in (DATA / "humaneval_tests.jsonl").read_text().splitlines()]
    assert len(tests) == 164
    entry = tests[2]
    (tmp_path / "solution.py").write_text(entry["prompt"] + entry["canonical_solution"])
    code, said = _humaneval(tmp_path, sample={"fields": {"task_id": entry["task_id"]}})
    assert code == 0 and said == {"reward": 1.0, "passed": True, "task_id": entry["task_id"], "reason": "passed"}
    (tmp_path / "solution.py").write_text(f"def {entry['entry_point']}(*args):\n    return None\n")
    code, said = _humaneval(tmp_path, "--task-id", entry["task_id"])
    assert code == 1 and said["passed"] is False and said["reward"] == 0.0 and "AssertionError" in said["reason"]
    (tmp_path / "solution.py").write_text(f"def {entry['entry_point']}(*args):\n    while True: pass\n")
    code, said = _humaneval(tmp_path, "--task-id", entry["task_id"], "--timeout", "1")
    assert code == 1 and said["reason"] == "timed out after 1s"
    (tmp_path / "solution.py").unlink()
    code, said = _humaneval(tmp_path, "--task-id", entry["task_id"])
    assert code == 1 and said["reason"].startswith("no readable solution.py")
    assert _humaneval(tmp_path)[0] == 2 and _humaneval(tmp_path, "--task-id", "HumanEval/9999")[0] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # it leaves nothing in the working directory
