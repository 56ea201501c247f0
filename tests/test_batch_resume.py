"""A batch survives its daemon: ``kill -9`` at several points, a torn batch-file
line, a checkpoint one prompt behind its files, a graceful restart — and in the
end every prompt index is written exactly once, discarded prompts stay
discarded, no batch file lost a complete line, and no finished prompt ran twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.harness import wait_for
from tests.test_batch_daemon import SCRIPTS, check_consistent, finish, read_run, start, write_dataset

N = 36
BATCH_SIZE = 10


def _script(i: int) -> list[dict]:
    if i % 8 == 3:
        return SCRIPTS["no_reasoning"]
    return [{**SCRIPTS["normal"][0], "sleep": 0.1}, SCRIPTS["normal"][1]]


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run_dir.glob("batch_*.jsonl")}


def _kept(before: dict[str, bytes], run_dir: Path) -> None:
    """Every complete line of every batch file is still there, in place."""
    for name, data in before.items():
        whole = data[: data.rfind(b"\n") + 1]
        assert (run_dir / name).read_bytes().startswith(whole), f"{name} lost a complete line"


def _processed(daemon, at_least: int) -> bool:
    return daemon.call("batch.status", id="crash")["progress"]["processed"] >= at_least


def test_kill9_at_several_points_then_everything_exactly_once(make_daemon, tmp_path):
    daemon = make_daemon({"supervisor": {"max_children": 3}})  # one item always waits: restarts re-own it
    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": f"prompt {i}", "script": _script(i)} for i in range(N)])
    record = start(daemon, dataset, "crash", batch_size=BATCH_SIZE, num_workers=4, allow_synthetic=True)
    run_dir = Path(record["run_dir"])
    discarded_seen: set[str] = set()
    restarts: list[str] = []

    def crash(at_least: int, damage=None) -> None:
        wait_for(lambda: _processed(daemon, at_least), 60, what=f"{at_least} prompts processed")
        daemon.kill9()
        before = _snapshot(run_dir)
        discarded_seen.update(read_run(run_dir)["checkpoint"]["discarded"])
        if damage:
            damage()
        daemon.start()
        restarts.append(daemon.call("status")["started_at"])
        _kept(before, run_dir)
        assert daemon.call("job", id="batch_crash")["status"] == "running"

    def torn_tail() -> None:  # a line the crash cut in the middle
        with open(run_dir / "batch_0.jsonl", "ab") as fh:
            fh.write(b'{"prompt_index": 7, "conversations": [{"fr')

    def checkpoint_behind() -> None:  # the crash came between the line and the checkpoint
        path = run_dir / "checkpoint.json"
        ckpt = json.loads(path.read_text())
        ckpt["done"] = ckpt["done"][:-1]
        path.write_text(json.dumps(ckpt))

    crash(6, torn_tail)
    crash(1)  # again, just after the restart
    crash(14, checkpoint_behind)
    wait_for(lambda: _processed(daemon, 22), 60, what="22 prompts processed")
    daemon.stop()  # a graceful restart: the batch goes on too
    daemon.start()
    restarts.append(daemon.call("status")["started_at"])
    final = finish(daemon, {"id": "batch_crash"}, timeout=120)
    assert final["status"] == "completed", final

    run = read_run(run_dir)
    check_consistent(run, BATCH_SIZE)
    written = [line["prompt_index"] for lines in run["batches"].values() for line in lines]
    discarded = set(run["checkpoint"]["discarded"])
    assert sorted(written + [int(i) for i in discarded]) == list(range(N))
    assert discarded == {str(i) for i in range(N) if i % 8 == 3} and discarded_seen <= discarded
    assert [t["prompt_index"] for t in run["trajectories"]] == sorted(written)
    items = daemon.call("ps", all=True, kind="batch_item")["jobs"]
    assert any(j["dispatched_at"] < t < (j["started_at"] or "") for j in items for t in restarts), \
        "no item queued before a restart ran after it"
    completed_items = Counter(j["goal"] for j in daemon.call("ps", all=True, kind="batch_item")["jobs"]
                              if j["status"] == "completed")
    assert max(completed_items.values()) == 1, "a finished prompt ran again"
    assert run["statistics"]["prompts"]["pending"] == 0 and run["statistics"]["duration"]["wall_seconds"] > 0
