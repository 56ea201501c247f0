"""Batch runs in a real hermesd (scripted provider): files, filters, statistics,
per-prompt scheduling, caps, cwd, refusals, cancel, resume of failures, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermesd.protocol import ProtocolError
from tests.harness import wait_for

# start_method (run again with the other start method, .ci/run): the tests of items as children — their
# scheduling, cwd, cancel and exits; not the files, refusals and command line, which no
# start method changes.

THINK = {"thinking": "I plan the answer.", "tool_calls": [{"name": "terminal", "input": {"command": "echo hi"}}]}
FLY = {"thinking": "I call a tool.", "tool_calls": [{"name": "fly_to_moon", "input": {}}]}
WEB = {"thinking": "I search.", "tool_calls": [{"name": "web_search", "input": {"query": "x"}}]}  # known, not offered
SCRIPTS = {
    "normal": [THINK, {"text": "done"}],
    "no_reasoning": [{"text": "an answer without any reasoning"}],
    # Hermes' partial: three replies in a row with invalid tool calls (never kept) end the sample
    "hallucinated": [THINK, FLY, WEB, FLY, {"text": "never reached"}],
    "failing": [{"error": "the model exploded"}],
    "incomplete": [THINK] * 6 + [{"text": "never reached"}],  # out of turns: not completed, partial
}
MIX = {3: "no_reasoning", 5: "hallucinated", 7: "failing", 9: "incomplete"}
"""Prompt kind by ``i % 10`` in :func:`mixed_dataset` (the rest are ``normal``)."""


def write_dataset(path: Path, entries: list[Any]) -> Path:
    """Write ``entries`` (dicts as JSON, strings as they are) one per line."""
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries))
    return path


def mixed_dataset(path: Path, n: int) -> tuple[Path, dict[int, str]]:
    """``n`` prompts of the kinds of :data:`MIX`, plus two bad lines (indices 1 and
    n // 2); returns the file and ``{prompt_index: kind}``."""
    entries: list[Any] = []
    kinds: dict[int, str] = {}
    for i in range(n):
        if len(entries) in (1, n // 2):
            entries.append("{not json" if len(entries) == 1 else json.dumps({"no_prompt": True}))
        kind = MIX.get(i % 10, "normal")
        kinds[len(entries)] = kind
        entries.append({"prompt": f"prompt number {i}", "script": SCRIPTS[kind], "task_id": f"T{len(entries)}"})
    return write_dataset(path, entries), kinds


def start(daemon, dataset: Path, name: str, **args: Any) -> dict[str, Any]:
    """``batch.run`` into ``daemon.base / "out"``."""
    args.setdefault("batch_size", 10)
    args.setdefault("output_dir", str(daemon.base / "out"))
    return daemon.call("batch.run", dataset_file=str(dataset), run_name=name, **args)


def finish(daemon, record: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """Wait for the batch job to end; returns its ``batch.status`` record."""
    daemon.wait_job(record["id"], timeout=timeout)
    return daemon.call("batch.status", id=record["id"])


def read_run(run_dir: Path) -> dict[str, Any]:
    """Everything a run wrote: ``batches`` ({N: [lines]}), ``trajectories``, ``checkpoint``, ``statistics``."""
    batches = {int(p.stem.split("_")[1]): [json.loads(x) for x in p.read_text().splitlines()]
               for p in run_dir.glob("batch_*.jsonl")}
    out = {"batches": batches, "checkpoint": json.loads((run_dir / "checkpoint.json").read_text())}
    for name in ("trajectories", "statistics"):
        path = run_dir / (f"{name}.jsonl" if name == "trajectories" else f"{name}.json")
        text = path.read_text() if path.exists() else None
        out[name] = None if text is None else ([json.loads(x) for x in text.splitlines()] if name == "trajectories"
                                               else json.loads(text))
    return out


def check_consistent(run: dict[str, Any], batch_size: int) -> None:
    """Every batch line sits in its batch file, each index once; trajectories are the
    merge minus the filtered lines; statistics match the files."""
    written = [line for lines in run["batches"].values() for line in lines]
    indices = [line["prompt_index"] for line in written]
    assert len(indices) == len(set(indices)), "a prompt index appears twice in the batch files"
    for number, lines in run["batches"].items():
        assert all(line["prompt_index"] // batch_size == number for line in lines)
    stats, ckpt = run["statistics"], run["checkpoint"]
    traj = [t["prompt_index"] for t in run["trajectories"]]
    assert traj == sorted(set(indices) - {int(i) for i in stats["filtered"]})
    by_index = {line["prompt_index"]: line for line in written}
    assert run["trajectories"] == [by_index[i] for i in traj]  # the very lines of the batch files
    assert set(ckpt["done"]) == set(indices) and not set(ckpt["discarded"]) & {str(i) for i in indices}
    p = stats["prompts"]
    assert (p["written"], p["in_trajectories"], p["discarded_no_reasoning"] + p["discarded_invalid_tool_calls"]) == (
        len(written), len(traj), len(ckpt["discarded"]))
    assert p["completed"] == sum(1 for line in written if line["completed"])
    assert p["failed"] == len(ckpt["failed"])
    calls = sum(line["tool_stats"][t]["count"] for line in written for t in line["tool_stats"])
    assert stats["tool_calls"]["total"] == calls
    spent = [line["metadata"]["tokens"]["input"] for line in written]
    spent += [d["tokens"].get("input", 0) for d in [*ckpt["discarded"].values(), *ckpt["failed"].values()]]
    assert stats["tokens"]["input"] == sum(spent)


def run_mixed(make_daemon, tmp_path: Path, n: int, load_with_datasets: bool) -> None:
    daemon = make_daemon({"supervisor": {"max_children": 4}})
    dataset, kinds = mixed_dataset(tmp_path / "prompts.jsonl", n)
    record = start(daemon, dataset, "mixed", num_workers=4, max_turns=5, allow_synthetic=True, distribution="no_web")
    assert record["bad_lines"] == 2 and record["errors"][0].startswith(f"{dataset}:2: invalid JSON")
    final = finish(daemon, record, timeout=60 + n * 2)
    assert final["status"] == "completed", final
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, 10)
    by_kind = {k: {i for i, kind in kinds.items() if kind == k} for k in SCRIPTS}
    written = {line["prompt_index"]: line for lines in run["batches"].values() for line in lines}
    assert set(written) == by_kind["normal"] | by_kind["hallucinated"] | by_kind["incomplete"]
    assert {int(i) for i in run["checkpoint"]["discarded"]} == by_kind["no_reasoning"]
    assert {int(i) for i in run["checkpoint"]["failed"]} == by_kind["failing"]
    assert run["statistics"]["filtered"] == {}  # synthetic samples allowed; invalid calls were never kept
    assert run["statistics"]["model"] == "scripted"  # no --model: the one the lines were made with
    assert all(written[i]["partial"] and not written[i]["completed"] for i in by_kind["hallucinated"])
    assert all(written[i]["metadata"]["exit_reason"] == "invalid_tool_calls" for i in by_kind["hallucinated"])
    assert all("fly_to_moon" not in json.dumps(written[i]["conversations"]) for i in by_kind["hallucinated"])
    assert all(written[i]["partial"] and not written[i]["completed"] for i in by_kind["incomplete"])
    assert all(written[i]["metadata"]["exit_reason"] == "max_turns" for i in by_kind["incomplete"])
    assert all(written[i]["completed"] for i in by_kind["normal"])
    assert run["statistics"]["prompts"]["partial"] == len(by_kind["hallucinated"] | by_kind["incomplete"])
    assert run["statistics"]["prompts"]["incomplete"] == len(by_kind["hallucinated"] | by_kind["incomplete"])
    assert written[min(by_kind["normal"])]["metadata"]["extra"] == {"task_id": f"T{min(by_kind['normal'])}"}
    assert final["progress"]["done"] == len(written) and final["progress"]["pending"] == 0
    line = written[min(by_kind["normal"])]
    assert [t["from"] for t in line["conversations"]] == ["system", "human", "gpt", "tool", "gpt"]
    assert line["conversations"][2]["value"].startswith("<think>\nI plan the answer.\n</think>")
    assert '"name": "terminal"' in line["conversations"][2]["value"] and "<tool_response>" in line["conversations"][3]["value"]
    assert line["tool_stats"]["terminal"] == {"count": 1, "success": 1, "failure": 0}
    assert line["metadata"]["synthetic"] is True and line["toolsets_used"] == ["terminal", "file"]
    systems = {t["conversations"][0]["value"] for t in run["trajectories"]}
    assert len(systems) == 1  # one system turn for the run: no host path, each tool once
    system = systems.pop()
    assert str(daemon.base) not in system and "Working directory: ." in system
    assert system.count('"name": "terminal"') == 1 and "Tools you can call" not in system
    if load_with_datasets:
        import datasets

        loaded = datasets.load_dataset(final["run_dir"], split="train", cache_dir=str(tmp_path / "hf"))
        assert len(loaded) == len(run["trajectories"])
        assert loaded[0]["prompt_index"] == run["trajectories"][0]["prompt_index"]
        assert loaded[0]["messages"] == run["trajectories"][0]["messages"] and "conversations" not in loaded.column_names
        hermes = datasets.load_dataset(final["run_dir"], "hermes", split="train", cache_dir=str(tmp_path / "hf"))
        assert hermes[0]["tool_stats"] == run["trajectories"][0]["tool_stats"]


def test_mixed_run_files_filters_statistics_and_datasets_loader(make_daemon, tmp_path):
    run_mixed(make_daemon, tmp_path, 30, load_with_datasets=True)


@pytest.mark.slow
def test_two_hundred_prompts(make_daemon, tmp_path):
    run_mixed(make_daemon, tmp_path, 200, load_with_datasets=True)


def _events(daemon) -> list[dict[str, Any]]:
    return daemon.call("events_since", since=0, limit=10000, types=["job.state"])["events"]


@pytest.mark.start_method
def test_per_prompt_scheduling_within_num_workers_and_max_children(make_daemon, tmp_path):
    daemon = make_daemon({"supervisor": {"max_children": 3}})
    quick = [{"thinking": "I think it over.", "text": "ok"}]
    entries = [{"prompt": "slow", "script": [{"thinking": "I think it over.", "text": "ok", "sleep": 4}]}]
    entries += [{"prompt": f"quick {i}", "script": quick} for i in range(11)]
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", entries), "sched", batch_size=4, num_workers=5)
    assert finish(daemon, record)["status"] == "completed"
    live, peak, started, ended = 0, 0, {}, {}
    for event in _events(daemon):
        rec = event["data"]["job"]
        if rec["kind"] != "batch_item":
            continue
        if event["data"]["status"] == "starting":
            live += 1
            started[rec["goal"]] = event["seq"]
        elif event["data"]["status"] in ("completed", "failed"):
            live -= 1
            ended[rec["goal"]] = event["seq"]
        peak = max(peak, live)
    assert peak == 3  # max_children (3) below num_workers (5)
    # the slow prompt held one worker; prompts of later batches ran meanwhile
    assert sum(1 for goal, seq in ended.items() if goal != "slow" and seq < ended["slow"]) >= 6


def test_with_warm_start_every_item_starts_warm(make_daemon, tmp_path):
    """Items wait for the spare the zygote is forking (milliseconds) instead of starting a
    whole interpreter each when the spares held run out (hermesd.system.procs.Spawner.at_hand)."""
    daemon = make_daemon()
    if daemon.call("status")["start"]["method"] != "forkserver":
        pytest.skip("warm start only (HERMES_TEST_START_METHOD=spawn)")
    wait_for(lambda: daemon.call("status")["start"].get("zygote"), 120, what="the zygote warm")
    quick = [{"thinking": "I think it over.", "text": "ok"}]
    entries = [{"prompt": f"quick {i}", "script": quick} for i in range(12)]
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", entries), "warm", num_workers=6)
    assert finish(daemon, record)["status"] == "completed"
    assert daemon.call("status")["start"]["starts"] == {"warm": 12, "cold": 0}


@pytest.mark.start_method
def test_cwd_is_honoured(  # docker_image: tests/test_containers.py
        make_daemon, tmp_path):
    daemon = make_daemon()
    where = tmp_path / "project"
    where.mkdir()
    script = [{"thinking": "I think it over.", "tool_calls": [{"name": "terminal", "input": {"command": "pwd > here.txt"}}]},
              {"text": "ok"}]
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", [{"prompt": "p", "cwd": str(where), "script": script}]),
                   "cwd")
    assert finish(daemon, record)["status"] == "completed"
    assert (where / "here.txt").read_text().strip() == str(where)


def test_bad_arguments_are_refused_before_anything_starts(daemon, tmp_path):
    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": "a"}])
    cases = [({"distribution": "nope"}, "unknown distribution 'nope'"), ({"batch_size": 0}, "batch_size"),
             ({"run_name": "../escape"}, "run_name"), ({"reasoning_effort": "huge"}, "reasoning_effort"),
             ({"output_dir": "relative"}, "absolute"), ({"num_workers": True}, "num_workers")]
    for extra, needle in cases:
        args = {"run_name": "r", **extra}
        with pytest.raises(ProtocolError) as err:
            start(daemon, dataset, **{"name": args.pop("run_name")}, **args)
        assert err.value.code == "bad_request" and needle in err.value.message, (extra, err.value.message)
    with pytest.raises(ProtocolError, match="cannot read the dataset"):
        start(daemon, tmp_path / "missing.jsonl", "r")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ProtocolError, match=r"no usable prompt \(the file has no lines\)"):
        start(daemon, tmp_path / "empty.jsonl", "r")
    (tmp_path / "bad.jsonl").write_text("oops\n{bad\n")
    with pytest.raises(ProtocolError, match=r"no usable prompt \(2 bad line\(s\); the first: .*bad.jsonl:1: invalid"):
        start(daemon, tmp_path / "bad.jsonl", "r")
    prefill = tmp_path / "prefill.json"
    for content, reason in (('{"role": "user"}', "expected a JSON list of messages, got dict"),
                            ('[{"role": "robot", "content": "x"}]', "message 0: 'role' must be one of"),
                            ('[{"role": "user", "content": 3}]', "message 0: 'content' must be a string"),
                            ("[oops", "not JSON")):
        prefill.write_text(content)
        with pytest.raises(ProtocolError) as err:
            start(daemon, dataset, "r", prefill_messages_file=str(prefill))
        assert err.value.code == "bad_request" and err.value.message.startswith(f"{prefill}: {reason}"), content
    with pytest.raises(ProtocolError) as err:
        start(daemon, dataset, "r", resume=True)
    assert err.value.code == "bad_request" and f"{daemon.base / 'out' / 'r'} holds no run" in err.value.message
    assert daemon.call("batch.list")["batches"] == [] and not (daemon.base / "out").exists()


@pytest.mark.start_method
def test_cancel_then_resume_runs_only_what_is_left_and_an_existing_run_needs_resume(make_daemon, tmp_path):
    daemon = make_daemon({"supervisor": {"max_children": 2}})
    entries = [{"prompt": f"p{i}", "script": [{"thinking": "I think it over.", "text": "ok", "sleep": 0.3}]} for i in range(12)]
    dataset = write_dataset(tmp_path / "d.jsonl", entries)
    record = start(daemon, dataset, "cr", batch_size=5, num_workers=2)
    wait_for(lambda: daemon.call("batch.status", id="cr")["progress"]["done"] >= 3, 30, what="3 prompts done")
    cancelled = daemon.call("batch.cancel", id="cr")
    assert cancelled["status"] == "cancelled"
    with pytest.raises(ProtocolError) as err:
        daemon.call("batch.cancel", id="cr")
    assert err.value.code == "invalid_state"
    run_dir = Path(record["run_dir"])
    done_before = set(read_run(run_dir)["checkpoint"]["done"])
    with pytest.raises(ProtocolError) as err:
        start(daemon, dataset, "cr", batch_size=5)
    assert err.value.code == "invalid_state" and "--resume" in err.value.message
    with pytest.raises(ProtocolError, match="--batch_size 4 differs"):
        start(daemon, dataset, "cr", batch_size=4, resume=True)
    items_before = len(daemon.call("ps", all=True, kind="batch_item")["jobs"])
    final = finish(daemon, start(daemon, dataset, "cr", batch_size=5, num_workers=2, resume=True))
    assert final["status"] == "completed" and final["progress"]["done"] == 12
    new_items = daemon.call("ps", all=True, kind="batch_item")["jobs"][items_before:]
    assert {j["goal"] for j in new_items if j["status"] == "completed"} == {f"p{i}" for i in range(12)} - {
        f"p{i}" for i in done_before}
    check_consistent(read_run(run_dir), 5)
    # nothing left to run; the daemon takes the dataset and batch size from the run's checkpoint
    again = finish(daemon, daemon.call("batch.run", run_name="cr", output_dir=str(daemon.base / "out"), resume=True))
    assert again["status"] == "completed" and again["progress"]["done"] == 12
    assert (again["settings"]["dataset_file"], again["settings"]["batch_size"]) == (str(dataset), 5)
    assert len(daemon.call("ps", all=True, kind="batch_item")["jobs"]) == items_before + len(new_items)


@pytest.mark.start_method
def test_the_generic_cancel_op_stops_a_batch_too(daemon, tmp_path):
    entries = [{"prompt": f"p{i}", "script": [{"thinking": "I think it over.", "text": "ok", "sleep": 60}]} for i in range(4)]
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", entries), "gc", num_workers=2)

    def items(*statuses: str) -> list[dict[str, Any]]:
        return [j for j in daemon.call("ps", all=True, kind="batch_item")["jobs"] if j["status"] in statuses]

    wait_for(lambda: len(items("running")) == 2, 30, what="two items running")
    assert daemon.call("cancel", id=record["id"])["status"] == "cancelled"
    wait_for(lambda: not items("queued", "starting", "running"), 30, what="every item stopped")
    wait_for(lambda: daemon.call("batch.status", id="gc")["summary"], 10, what="the run finalized")
    assert len(items("cancelled")) == 2 and (Path(record["run_dir"]) / "statistics.json").exists()


@pytest.mark.start_method
def test_a_failed_prompt_is_retried_by_resume(make_daemon, tmp_path):
    daemon = make_daemon()
    entries = [{"prompt": f"p{i}", "script": [{"thinking": "I think it over.", "text": "ok", "sleep": 3 if i == 1 else 0}]}
               for i in range(3)]
    dataset = write_dataset(tmp_path / "d.jsonl", entries)
    record = start(daemon, dataset, "retry", num_workers=3)

    def slow_item() -> dict[str, Any] | None:
        jobs = daemon.call("ps", kind="batch_item")["jobs"]
        return next((j for j in jobs if j["goal"] == "p1" and j["status"] == "running"), None)

    os.kill(wait_for(slow_item, 30, what="item p1 running")["pid"], signal.SIGKILL)
    final = finish(daemon, record)
    assert final["status"] == "completed" and final["progress"]["failed"] == 1
    run = read_run(Path(record["run_dir"]))
    assert list(run["checkpoint"]["failed"]) == ["1"] and run["statistics"]["prompts"]["failed"] == 1
    assert "before reporting a result" in run["checkpoint"]["failed"]["1"]["error"]
    final = finish(daemon, start(daemon, dataset, "retry", resume=True))
    assert final["progress"] == {**final["progress"], "done": 3, "failed": 0}
    run = read_run(Path(record["run_dir"]))
    assert run["checkpoint"]["failed"] == {} and run["statistics"]["prompts"]["written"] == 3
    check_consistent(run, 10)


# the command line ------------------------------------------------------------------


def hermes_batch(daemon, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``hermes-batch ARGS`` as a real process in the daemon's work directory."""
    return subprocess.run([sys.executable, "-c", "from client.batch import main; main()", *args], env=daemon.env,
                          cwd=str(daemon.work), capture_output=True, text=True, timeout=timeout)


def test_hermes_batch_command_line(daemon, tmp_path):
    dataset = write_dataset(tmp_path / "d.jsonl", ["oops", *[{"prompt": f"p{i}", "script": SCRIPTS["normal"]}
                                                            for i in range(4)]])
    listed = hermes_batch(daemon, "--list_distributions")
    assert listed.returncode == 0 and "default (default): terminal 100%" in listed.stdout
    refused = hermes_batch(daemon, "--dataset_file", str(dataset), "--batch_size", "2", "--run_name", "cli",
                           "--distribution", "nope")
    assert refused.returncode == 2 and "unknown distribution 'nope'" in refused.stderr
    assert refused.stderr.startswith("hermes-batch: ")
    missing = hermes_batch(daemon, "--dataset_file", str(dataset))
    assert missing.returncode == 2 and "--batch_size, --run_name" in missing.stderr
    assert not (daemon.work / "data").exists()
    done = hermes_batch(daemon, "--dataset_file", str(dataset), "--batch_size", "2", "--run_name", "cli",
                        "--num_workers", "2", "--allow_synthetic", "--verbose")
    assert done.returncode == 0, done.stderr
    assert f"{dataset}:1: invalid JSON" in done.stderr
    assert "batch_cli  completed" in done.stdout and "4 of 4 prompts written" in done.stdout
    assert "batch_cli: 4/4 · done 4" in done.stdout  # the plain progress line (stdout is not a TTY)
    assert "prompt 1 (item_" in done.stderr and ": written: completed" in done.stderr  # --verbose
    assert sorted(p.name for p in (daemon.work / "data" / "cli").iterdir()) == [
        "README.md", "batch_0.jsonl", "batch_1.jsonl", "batch_2.jsonl", "checkpoint.json", "messages.jsonl", "statistics.json",
        "trajectories.jsonl"]
    detached = hermes_batch(daemon, "--dataset_file", str(dataset), "--batch-size", "2", "--run-name", "cli2",
                            "--detach", "--json")
    record = json.loads(detached.stdout)
    assert detached.returncode == 0 and record["id"] == "batch_cli2"
    daemon.wait_job("batch_cli2")
    status = daemon.ctl("batch", "status", "cli2", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["progress"]["done"] == 4
    listing = daemon.ctl("batch", "list", "--json")
    assert [json.loads(x)["id"] for x in listing.stdout.splitlines()] == ["batch_cli", "batch_cli2"]
    again = daemon.ctl("batch", "run", "--dataset_file", str(dataset), "--batch_size", "2", "--run_name", "cli")
    assert again.returncode == 6 and "--resume" in again.stderr
    resumed = hermes_batch(daemon, "--run_name", "cli", "--resume")  # dataset and batch size from the checkpoint
    assert resumed.returncode == 0 and "4 of 4 prompts written" in resumed.stdout, resumed.stderr
    nothing = hermes_batch(daemon, "--run_name", "never", "--resume")
    never = daemon.work / "data" / "never"
    assert nothing.returncode == 2 and f"cannot resume 'never': {never} holds no run" in nothing.stderr
    nothing = hermes_batch(daemon, "--run_name", "never", "--resume", "--dataset_file", str(dataset),
                           "--batch_size", "2")
    assert nothing.returncode == 2 and str(never) in nothing.stderr and not never.exists()
    assert daemon.call("batch.list")["batches"][-1]["id"] != "batch_never"
    cancel = daemon.ctl("batch", "cancel", "cli", "--json")
    assert cancel.returncode == 6 and json.loads(cancel.stdout)["error"]["code"] == "invalid_state"
