"""hermesctl as people use it, without a terminal: names checked where given,
sessions listed, shown, changed, reset and deleted, readable output for every
command (no Python lists, no ``None``, no raw control characters), text from
standard input or a file, JSON usage errors, and what needs no daemon works
without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.harness import wait_for


def _lines(out: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_names_in_the_config_are_checked_by_check_config_and_reload(daemon):
    bad = daemon.home / "config.yaml"
    cfg = {**daemon.config, "toolsets": ["terminal", "bogus"], "base_url": "not a url"}
    bad.write_text(yaml.safe_dump(cfg))
    check = subprocess.run([sys.executable, "-m", "hermesd.cli", "check-config", str(bad)], env=daemon.env,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 7
    assert "toolsets: unknown name(s) 'bogus'" in check.stderr and "base_url: must be an http:// or https:// URL" \
        in check.stderr
    reload = daemon.ctl("reload")
    assert reload.returncode == 7 and "'bogus'" in reload.stderr
    assert daemon.ctl("send", "main", "hi", "--toolsets", "terminal,bogus").returncode == 2
    assert daemon.call("session.list")["sessions"] == []  # nothing stored a bad name


def test_sessions_listed_shown_changed_reset_and_deleted(daemon):
    sent = _lines(daemon.ctl("send", "work", "hello", "--toolsets", "terminal", "--wait", "--json"))
    assert sent[0]["status"] == "completed"
    again = daemon.ctl("send", "work", "more", "--toolsets", "file")  # would be ignored: refused
    assert again.returncode == 6 and "sessions toolsets work" in again.stderr
    assert daemon.ctl("send", "work", "same toolsets are fine", "--toolsets", "terminal").returncode == 0
    wait_for(lambda: not daemon.call("session.get", session="work")["busy"], what="the turn to end")

    listed = daemon.ctl("sessions")
    assert listed.returncode == 0 and listed.stdout.startswith("work ") and "toolsets terminal, delegation" in listed.stdout
    shown = daemon.ctl("sessions", "show", "work")
    assert "toolsets: terminal, delegation" in shown.stdout and "messages: " in shown.stdout
    changed = _lines(daemon.ctl("sessions", "toolsets", "work", "file,web", "--json"))[0]
    assert changed["toolsets"] == ["file", "web", "delegation"]
    assert daemon.ctl("sessions", "toolsets", "work", "nope").returncode == 2
    turn = daemon.call("session.send", session="work", text="with new tools")["turn"]
    assert turn["toolsets"] == ["file", "web", "delegation"]
    daemon.wait_job(turn["id"])

    before = daemon.call("session.get", session="work")["messages"]
    reset = daemon.ctl("sessions", "reset", "work")
    assert reset.returncode == 0 and f"{before} messages forgotten" in reset.stdout
    assert daemon.call("session.history", session="work")["messages"] == []
    assert daemon.ctl("sessions", "delete", "work").returncode == 0
    assert daemon.ctl("sessions", "show", "work").returncode == 5
    assert daemon.ctl("sessions", "delete", "work").returncode == 5


def test_output_for_people_is_readable_and_safe(daemon):
    hello = daemon.ctl("hello")
    assert hello.returncode == 0 and "[" not in hello.stdout and "capabilities: delegate, background" in hello.stdout

    quiet = daemon.ctl("delegate", "quiet in a pipe")  # a foreground wait shows itself only on a terminal
    assert quiet.returncode == 0 and quiet.stderr == "" and "completed" in quiet.stdout

    hostile = "ring\x07 the bell\rand rewrite"
    job = daemon.wait_job(daemon.delegate(hostile, script=[{"text": "done\x1b[31m red"}])["id"])["id"]
    for args in (("result", job), ("ps", "--all"), ("events", "--since", "0")):
        out = daemon.ctl(*args)
        assert out.returncode == 0 and "\x07" not in out.stdout and "\x1b" not in out.stdout, args
    result = daemon.ctl("result", job)
    assert "ring\\x07 the bell\\x0dand rewrite" in result.stdout and "done\\x1b[31m red" in result.stdout

    traj = daemon.ctl("result", job, "--trajectory")
    assert "  trajectory:" in traj.stdout and "  [human]\n    ring\\x07" in traj.stdout and "  [gpt]" in traj.stdout

    daemon.ctl("profile", "create", "helper", "--description", "Helps")
    shown = daemon.ctl("profile", "show", "helper")
    assert "None" not in shown.stdout and "toolsets: (config default)" in shown.stdout
    broken = daemon.home / "profiles" / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("description: [unclosed\nmodel: x\n")
    bad = daemon.ctl("profile", "show", "broken")
    assert bad.returncode == 7 and len(bad.stderr.strip().splitlines()) == 1 and "config.yaml:" in bad.stderr
    listed = daemon.ctl("profile", "list")
    assert listed.returncode == 7 and "broken         (broken: " in listed.stdout and "helper" in listed.stdout

    daemon.call("reload")
    task = daemon.call("kanban.create", title="parked", assignee="helper", triage=True)["id"]
    lines = daemon.ctl("events", "--since", "0").stdout.splitlines()
    assert any("daemon.reloaded" in line and " - " not in line and "from " in line for line in lines)
    assert any("kanban.created" in line and f" {task} " in line and "for helper" in line for line in lines)

    # the board has settled already: watch still prints what happened, then exits
    watched = daemon.ctl("kanban", "watch", "--since", "0", "--until-settled", timeout=60)
    assert watched.returncode == 0 and "kanban.created" in watched.stdout and task in watched.stdout


def test_text_from_stdin_or_a_file_and_logs_of_a_batch(daemon):
    long_goal = "  x" + "x\n\n" * 70_000  # beyond what a shell passes as one argument; inner lines
    bg = _lines(daemon.ctl("delegate", "--background", "--json", "-", input_text=long_goal + " \n\n"))[0]
    assert daemon.call("job", id=bg["id"])["goal"] == long_goal.rstrip()  # less what trails, as `< task.md` has
    goal_file = daemon.work / "goal.txt"
    goal_file.write_text("goal from a file\n")
    rec = _lines(daemon.ctl("delegate", "--background", "--json", "--goal-file", str(goal_file)))[0]
    assert rec["goal"] == "goal from a file"
    piped = _lines(daemon.ctl("delegate", "--background", "--json", "--goal-file", "-", input_text="piped\n"))[0]
    assert piped["goal"] == "piped"
    typed = _lines(daemon.ctl("delegate", "--background", "--json", "typed as it is \n"))[0]
    assert typed["goal"] == "typed as it is \n"
    both = daemon.ctl("delegate", "text", "--goal-file", str(goal_file))
    assert both.returncode == 2 and "not both" in both.stderr
    sent = _lines(daemon.ctl("send", "main", "-", "--json", input_text="message from stdin\n"))[0]
    assert sent["turn"]["goal"] == "message from stdin"
    daemon.ctl("kanban", "comment", "kb_1", "-", input_text="x")  # no such task: exit 5, not a usage error

    dataset = daemon.work / "prompts.jsonl"
    dataset.write_text("".join(f'{{"prompt": "say {i}"}}\n' for i in range(2)))
    batch = daemon.call("batch.run", run_name="logs", dataset_file=str(dataset), batch_size=2, num_workers=2)
    daemon.wait_job(batch["id"])
    logs = daemon.ctl("logs", batch["id"])
    assert logs.returncode == 0 and logs.stdout.count("==> item_") == 2 and "finished: completed" in logs.stdout


def test_usage_errors_json_and_what_needs_no_daemon(tmp_path):
    env = {"HERMES_RUNTIME_DIR": str(tmp_path / "nowhere"), "HERMES_HOME": str(tmp_path / "home")}

    def run(program: str, *argv: str) -> subprocess.CompletedProcess:
        modules = {"client": "client", "client.batch": "client.batch"}  # python -m client.batch is hermes-batch
        command = ([sys.executable, "-m", modules[program]] if program in modules
                   else [str(Path(sys.executable).parent / program)])
        return subprocess.run([*command, *argv], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)

    usage = run("client", "--json", "delegate")
    assert usage.returncode == 2 and json.loads(usage.stdout)["error"]["code"] == "bad_request"
    bogus = run("client", "wait", "x", "--bogus", "--json")
    assert bogus.returncode == 2 and "--bogus" in json.loads(bogus.stdout)["error"]["message"]
    dists = run("hermes-batch", "--list_distributions")
    assert dists.returncode == 0 and dists.stdout.startswith("default (default): ")
    assert run("client.batch", "--list_distributions").stdout == dists.stdout
    assert run("client", "status").returncode == 3
    helped = run("client", "--help")
    assert "_HERMESCTL_COMPLETE=bash_source hermesctl" in helped.stdout and "130 interrupted" in helped.stdout
