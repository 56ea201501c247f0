"""Verifiers, rewards and groups in a real hermesd (scripted provider): HumanEval's tests as the
verifier, a line's own verifier, a hanging and a confused verifier, --min_reward, pass@k,
groups.jsonl, and groups resumed exactly across kill -9."""

from __future__ import annotations

import pytest

import json
import sys
from collections import Counter
from pathlib import Path

from tests.harness import DATA, ROOT, wait_for
from tests.test_batch_daemon import SCRIPTS, check_consistent, finish, read_run, start, write_dataset

HUMANEVAL = ROOT / "batch" / "verifiers" / "humaneval.py"
TESTS = [json.loads(x) for x in (DATA / "humaneval_tests.jsonl").read_text().splitlines()]
PROMPTS = [json.loads(x) for x in (DATA / "humaneval_prompts.jsonl").read_text().splitlines()]


def _writes(content: str) -> list[dict]:
    return [{"thinking": "I write the function to solution.py.",
             "tool_calls": [{"name": "write_file", "input": {"path": "solution.py", "content": content}}]},
            {"text": "solution.py is written"}]


ATTEMPT_SAYS = (f"{sys.executable} -c \"import json, os; s = json.loads(os.environ['HERMES_SAMPLE']); "
                "print(os.getcwd()); print(json.dumps({'reward': 0.5 + 0.25 * s['attempt'], "
                "'passed': s['attempt'] == 1, 'group': s['group_id']}))\"")


def _dataset(path: Path) -> Path:
    right, wrong = TESTS[0], TESTS[1]
    lines = [{**PROMPTS[0], "script": _writes(right["prompt"] + right["canonical_solution"])},
             {**PROMPTS[1], "script": _writes(f"def {wrong['entry_point']}(s):\n    return []\n")},
             {"prompt": "p2", "script": SCRIPTS["normal"], "verifier": ATTEMPT_SAYS},
             {"prompt": "p3", "script": SCRIPTS["normal"], "verifier": "sleep 30"},
             {"prompt": "p4", "script": SCRIPTS["normal"], "verifier": "echo '{\"reward\": \"lots\"}'"},
             {"prompt": "p5", "script": SCRIPTS["no_reasoning"], "task_id": "HumanEval/0"}]
    return write_dataset(path, lines)


def test_verifiers_rewards_groups_and_min_reward(make_daemon, tmp_path):
    daemon = make_daemon()
    verifier = f"{sys.executable} {HUMANEVAL} --tests {DATA / 'humaneval_tests.jsonl'}"
    record = start(daemon, _dataset(tmp_path / "d.jsonl"), "scored", batch_size=4, num_workers=4,
                   allow_synthetic=True, verifier=verifier, verifier_timeout=1.5, min_reward=0.5,
                   samples_per_prompt=2)
    final = finish(daemon, record)
    assert final["status"] == "completed", final
    run_dir = Path(final["run_dir"])
    run = read_run(run_dir)
    check_consistent(run, 4)
    lines = {line["prompt_index"]: line for lines in run["batches"].values() for line in lines}
    assert sorted(lines) == list(range(10))  # 6 lines x 2 attempts, the last line's discarded
    assert {i: (ln["group_id"], ln["attempt"]) for i, ln in lines.items()} == {i: (i // 2, i % 2) for i in range(10)}
    rewards = {i: ln["reward"] for i, ln in lines.items()}
    assert rewards == {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.0, 4: 0.5, 5: 0.75, 6: None, 7: None, 8: None, 9: None}
    v = {i: ln["verifier"] for i, ln in lines.items()}
    assert v[0]["passed"] and v[0]["details"] == {"task_id": "HumanEval/0", "reason": "passed"}
    assert not v[2]["passed"] and v[2]["exit_status"] == 1 and "AssertionError" in v[2]["details"]["reason"]
    assert v[5]["passed"] and not v[4]["passed"] and v[5]["details"] == {"group": 2}
    assert v[4]["output"].splitlines()[0] == "."  # the working directory as the placeholder
    assert "did not finish" in v[6]["error"] and "timed out after 1.5s" in v[6]["error"] and v[6]["passed"] is None
    assert "not a finite number" in v[8]["error"]
    assert all(str(daemon.base) not in json.dumps(ln) for ln in lines.values())
    assert set(run["checkpoint"]["discarded"]) == {"10", "11"}
    assert run["checkpoint"]["discarded"]["10"]["reward"] == 0.0  # judged before it was discarded

    stats = run["statistics"]
    assert stats["rewards"] == {"verified": 12, "rewarded": 8, "mean": round(3.25 / 8, 4), "passed": 3,
                                "pass_rate": 0.375, "verifier_errors": 4}
    assert stats["groups"] == {"samples_per_prompt": 2, "groups": 4, "pass@1": 0.375, "pass@k": 0.5}
    assert [t["prompt_index"] for t in run["trajectories"]] == [0, 1, 4, 5]
    assert stats["prompts"]["filtered_below_min_reward"] == 6 and stats["prompts"]["in_trajectories"] == 4
    assert final["progress"]["rewards"] == stats["rewards"]
    assert "pass@1 0.375, pass@2 0.5" in final["summary"]

    exported = [json.loads(x) for x in (run_dir / "groups.jsonl").read_text().splitlines()]
    assert [g["group_id"] for g in exported] == [0, 1, 2, 3, 4]
    assert exported[2]["rewards"] == [0.5, 0.75] and exported[2]["passed"] == [False, True]
    assert [m["role"] for m in exported[0]["prompt"]] == ["system", "user"]
    assert exported[0]["completions"][0][0]["role"] == "assistant" and len(exported[0]["completions"]) == 2
    assert exported[0]["metadata"] == {"task_id": "HumanEval/0"}

    import datasets

    loaded = datasets.load_dataset(str(run_dir), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded["reward"] == [1.0, 1.0, 0.5, 0.75] and loaded["passed"] == [True, True, False, True]


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_groups_resume_exactly_across_kill9(make_daemon, tmp_path):
    daemon = make_daemon({"supervisor": {"max_children": 2}})
    slow = [{**SCRIPTS["normal"][0], "sleep": 0.2}, SCRIPTS["normal"][1]]
    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": f"prompt {i}", "script": slow} for i in range(5)])
    record = start(daemon, dataset, "groups", batch_size=4, num_workers=3, allow_synthetic=True,
                   samples_per_prompt=3, verifier="true")
    wait_for(lambda: daemon.call("batch.status", id="groups")["progress"]["processed"] >= 5, 60, what="5 settled")
    daemon.kill9()
    daemon.start()
    final = finish(daemon, {"id": record["id"]})
    assert final["status"] == "completed", final
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, 4)
    written = sorted((ln["group_id"], ln["attempt"]) for lines in run["batches"].values() for ln in lines)
    assert written == [(g, a) for g in range(5) for a in range(3)]
    items = daemon.call("ps", all=True, kind="batch_item")["jobs"]
    ran = Counter(j["goal"] for j in items if j["status"] == "completed")
    assert set(ran.values()) == {3}, ran  # each prompt's three attempts finished once each
    assert run["statistics"]["groups"] == {"samples_per_prompt": 3, "groups": 5, "pass@1": 1.0, "pass@k": 1.0}
