"""Batch output clean of the host, and filters that say what they did (real hermesd, scripted provider)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from child.hostmask import HostMask
from tests.test_batch_daemon import SCRIPTS, finish, read_run, start, write_dataset

LOOK = {"thinking": "I look around.", "tool_calls": [
    {"name": "terminal", "input": {"command": "echo pwd=$(pwd); echo ls=$(ls -A); echo home=$HOME; "
                                              "echo host=$(hostname); echo hermes=$HERMES_HOME; "
                                              "echo run=$HERMES_RUNTIME_DIR; echo up=$(ls -d \"$PWD\"/..); "
                                              "echo made > made.txt"}}]}


def test_a_job_works_in_a_folder_of_its_own_and_its_line_shows_no_host(make_daemon, tmp_path):
    daemon = make_daemon()
    verifier = 'printf \'{"reward": 1, "note": "%s %s"}\' "$PWD" "$HOME"'  # its own JSON names host paths
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", [{"prompt": "p", "script": [LOOK, {"text": "ok"}]}]),
                   "clean", allow_synthetic=True, verifier=verifier)
    final = finish(daemon, record)
    assert final["status"] == "completed", final
    line = read_run(Path(final["run_dir"]))["trajectories"][0]
    assert line["reward"] == 1 and line["verifier"]["details"]["note"] == ". ~", line["verifier"]
    result = next(m["content"] for m in line["messages"] if m["role"] == "tool")
    shown = dict(x.split("=", 1) for x in result.splitlines() if "=" in x)
    assert shown["pwd"] == "."  # the placeholder the system prompt shows
    assert shown["ls"] == ""  # nothing of the job's bookkeeping beside its work
    assert (shown["home"], shown["hermes"], shown["run"], shown["up"]) == ("~", "$HERMES_HOME", "$HERMES_RUNTIME_DIR",
                                                                         "./..")
    assert shown["host"] == ("localhost" if len(socket.gethostname()) >= 2 else socket.gethostname())
    text = json.dumps(line)
    for leak in (str(daemon.base), str(daemon.home), os.environ.get("HOME") or "/nowhere", str(tmp_path)):
        assert leak not in text, leak
    item = next(j for j in daemon.call("ps", all=True, kind="batch_item")["jobs"])
    folder = daemon.home / "jobs" / item["id"]
    assert sorted(p.name for p in (folder / "work").iterdir()) == ["made.txt"]
    assert (folder / "log").is_file() and not (folder / "work" / "log").exists()
    logs = daemon.ctl("logs", item["id"])
    assert logs.returncode == 0 and "terminal" in logs.stdout


def test_out_of_turns_is_partial_and_a_resume_keeps_the_runs_settings(make_daemon, tmp_path):
    daemon = make_daemon()
    lines = [{"prompt": "p0", "script": SCRIPTS["normal"]}, {"prompt": "p1", "script": SCRIPTS["incomplete"]},
             {"prompt": "p2", "script": SCRIPTS["normal"]}, {"prompt": "p3", "script": SCRIPTS["normal"]}]
    dataset = write_dataset(tmp_path / "d.jsonl", lines)
    first = finish(daemon, start(daemon, dataset, "kept", max_samples=2, max_turns=3, allow_synthetic=True,
                                 exclude_partial=True, verifier="true"))
    assert first["status"] == "completed", first
    run = read_run(Path(first["run_dir"]))
    assert run["statistics"]["filtered"] == {"1": {"reason": "partial", "tools": []}}
    assert [t["prompt_index"] for t in run["trajectories"]] == [0]
    # a resume given only its name: the run's --max_samples, --max_turns, filters and verifier hold
    again = finish(daemon, daemon.call("batch.run", run_name="kept", output_dir=str(daemon.base / "out"), resume=True))
    assert again["status"] == "completed", again
    s = again["settings"]
    assert (s["max_samples"], s["max_turns"], s["exclude_partial"], s["verifier"]) == (2, 3, True, "true")
    assert again["progress"]["total"] == 2 and read_run(Path(again["run_dir"]))["statistics"]["filtered"] == {
        "1": {"reason": "partial", "tools": []}}
    assert len(daemon.call("ps", all=True, kind="batch_item")["jobs"]) == 2  # nothing ran again


def test_the_model_servers_address_and_port_are_masked(tmp_path):
    work = tmp_path / "jobs" / "item_1" / "work"
    mask = HostMask(str(work), ".", "http://127.0.0.1:8765/v1/", environ={"HOME": str(tmp_path / "home")})
    said = (f"POST http://127.0.0.1:8765/v1/chat/completions: connection refused (127.0.0.1:8765); "
            f"{work}/solution.py; {tmp_path}/home/.cache; 127.0.0.1:87650 stays")
    assert mask.text(said) == ("POST $BASE_URL/chat/completions: connection refused ($BASE_URL); ./solution.py; "
                               "~/.cache; 127.0.0.1:87650 stays")
    assert HostMask(str(work), ".", "https://api.example.com/v1").text("api.example.com is up") == \
        "api.example.com is up"  # a server without a port names no port of this host
