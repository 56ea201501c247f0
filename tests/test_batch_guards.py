"""What ``hermes-batch`` refuses or reports instead of a surprise (real daemon, real CLI).

Any dataset line — nested 100,000 deep, a lone surrogate escape — is ``FILE:LINE: reason`` and
the other lines run; ``--resume`` over a dataset changed in place is refused naming its first
changed line (``--allow-changed-dataset`` goes on); a ``--base_url`` that is no http(s) URL
is refused as the config refuses it.
"""

from __future__ import annotations

import json

from tests.test_batch_daemon import SCRIPTS, hermes_batch


def _line(i: int) -> str:
    return json.dumps({"prompt": f"p{i}", "script": SCRIPTS["normal"]})


def _written(run_dir) -> list[str]:
    lines = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    return sorted(line["conversations"][1]["value"] for line in lines)


def test_hostile_lines_and_a_dataset_changed_under_a_resume(daemon, tmp_path):
    deep = '{"prompt": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join([_line(0), deep, '{"prompt": "\\ud800 lone"}', _line(3)]) + "\n")
    args = ("--dataset_file", str(dataset), "--batch_size", "2", "--run_name", "g", "--allow_synthetic")
    first = hermes_batch(daemon, *args)
    assert first.returncode == 0, first.stderr
    assert f"{dataset}:2: JSON nested deeper than" in first.stderr
    assert f"{dataset}:3: field 'prompt': invalid Unicode (a lone surrogate \\ud800)" in first.stderr
    assert "Traceback" not in daemon.log() and "2 of 2 prompts written" in first.stdout
    run_dir = daemon.work / "data" / "g"
    assert _written(run_dir) == ["p0", "p3"]

    dataset.write_text("\n".join([_line(0), _line(3)]) + "\n")  # the bad lines removed: line 2 moved
    refused = hermes_batch(daemon, "--run_name", "g", "--resume")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"hermes-batch: cannot resume 'g': {dataset}:2 changed since the run began (not the line that ran); "
        "prompts are known by their line, so a resume would mix them up: restore the file, start a new "
        "--run_name, or pass --allow-changed-dataset"]
    dataset.write_text(_line(0) + "\n")
    shorter = hermes_batch(daemon, "--run_name", "g", "--resume")
    assert shorter.returncode == 2 and f"{dataset}:2 changed since the run began (removed)" in shorter.stderr
    dataset.write_text("\n".join([_line(0), _line(7)]) + "\n")
    allowed = hermes_batch(daemon, "--run_name", "g", "--resume", "--allow-changed-dataset", "--allow_synthetic")
    assert allowed.returncode == 0, allowed.stderr
    assert "p7" in _written(run_dir)  # index 1 was a bad line: it never ran, it runs now
    dataset.write_text("\n".join([_line(0), _line(7), _line(8)]) + "\n")  # appended: nothing that ran changed
    appended = hermes_batch(daemon, "--run_name", "g", "--resume")
    assert appended.returncode == 0, appended.stderr


def test_a_base_url_that_is_no_http_url_is_refused(daemon, tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(_line(0) + "\n")
    out = hermes_batch(daemon, "--dataset_file", str(dataset), "--batch_size", "1", "--run_name", "u",
                       "--base_url", "ftp://x")
    assert out.returncode == 2, out
    assert out.stderr.strip() == ("hermes-batch: argument 'base_url' must be an http:// or https:// URL such as "
                                  "http://localhost:8000, not 'ftp://x'")
    assert not (daemon.work / "data" / "u").exists()


def test_progress_counts_every_running_prompt(daemon, tmp_path):
    """While prompts are pending, ``running`` is ``num_workers``: the prompt taking a freed slot counts."""
    dataset = tmp_path / "d.jsonl"
    slow = [{"thinking": "I wait.", "text": "done", "sleep": 0.5}]
    dataset.write_text("".join(json.dumps({"prompt": f"p{i}", "script": slow}) + "\n" for i in range(10)))
    out = hermes_batch(daemon, "--dataset_file", str(dataset), "--batch_size", "5", "--run_name", "r",
                       "--num_workers", "3", "--allow_synthetic")
    assert out.returncode == 0, out.stderr
    progress = [e["data"] for e in daemon.call("events_since", since=0, limit=1000)["events"]
                if e["type"] == "batch.progress"]
    assert len(progress) == 10
    assert all(p["running"] == 3 for p in progress if p["pending"] > 0), progress
    assert all(p["done"] + p["failed"] + p["discarded"] + p["running"] + p["pending"] == 10 for p in progress)
