"""What hermesctl prints for people: ids that stay whole in a narrow terminal, top's
snapshot fitted to it, slash-command answers as text, out-of-range numbers refused as
usage errors, and a deleted working directory refused without a traceback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from hermesd.protocol import ProtocolError
from tests.harness import wait_for


def test_ps_keeps_ids_whole_and_cuts_only_the_goal(daemon):
    long_goal = "a goal long enough to be cut in a narrow terminal " * 3
    ids = [daemon.wait_job(daemon.delegate(goal, script=[{"text": "ok"}])["id"])["id"] for goal in (long_goal, "short")]
    out = daemon.ctl("ps", "--all", env={"COLUMNS": "60"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ID", "KIND", "STATUS", "DURATION", "CALLS", "COST", "GOAL"]
    assert {line.split()[0] for line in lines[1:]} == set(ids)
    assert any(line.endswith("…") and len(line) <= 86 for line in lines[1:])  # the fixed columns + 20 of goal
    assert any(line.endswith("short") for line in lines[1:])
    piped = daemon.ctl("ps", "--all", env={"COLUMNS": ""})  # no terminal, no COLUMNS: lines stay whole
    assert any(line.endswith(long_goal.rstrip()) for line in piped.stdout.splitlines()), piped.stdout


def test_top_once_fits_the_width_and_keeps_calls_and_cost_on_a_running_row(daemon):
    goal = "refactor the billing module so that every provider's price table is read once and cached"
    script = [{"text": "look", "sleep": 0, "tool_calls": [{"name": "terminal", "input": {"command": "true"}}]},
              {"text": "and rest", "sleep": 60}]
    job = daemon.delegate(goal, background=True, script=script, toolsets=["terminal"])["id"]
    wait_for(lambda: daemon.call("job", id=job)["api_calls"] >= 1, what="the job's first model call")
    row = re.compile(rf"^ +{job}  running  \d+s  refactor.*  · \d+ calls?  (\$[\d.]+|unknown|-)")
    for columns, width in (("80", 80), ("64", 64), ("", 80)):  # "": no terminal, no COLUMNS: 80
        shown = daemon.ctl("top", "--once", env={"COLUMNS": columns})
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].startswith("hermesd ") and all(len(line) <= width for line in lines), (columns, shown.stdout.splitlines())
        assert any(row.search(line) for line in lines), (columns, shown.stdout)
    wide = daemon.ctl("top", "--once", env={"COLUMNS": "300"}).stdout
    assert f"{goal[:49]}…  · " in wide, wide  # room enough: as much of the goal as a row ever shows
    daemon.call("cancel", id=job)


def test_slash_commands_answer_in_text(daemon):
    tasks = daemon.ctl("send", "main", "/tasks")
    assert tasks.returncode == 0 and tasks.stdout.strip() == "no tasks"
    helped = daemon.ctl("send", "main", "/help")
    assert helped.stdout.splitlines()[0].startswith("/background PROMPT — ")
    chat = daemon.ctl("chat", "main", input_text="/tasks\n")
    assert "you> no tasks" in chat.stdout and "{" not in chat.stdout


def test_negative_numbers_are_usage_errors(daemon):
    for args, option in ((("--timeout", "-1", "status"), "--timeout"), (("wait", "x", "--timeout", "-5"), "--timeout"),
                         (("events", "--since", "-5"), "--since"), (("kanban", "watch", "--since", "-1"), "--since")):
        out = daemon.ctl(*args)
        assert out.returncode == 2 and f"Invalid value for '{option}'" in out.stderr, (args, out.stderr)


def test_logs_say_what_the_agent_did(daemon):
    script = [{"text": "look", "tool_calls": [{"name": "terminal", "input": {"command": "echo from-the-tool"}}]},
              {"text": "done"}]
    job = daemon.wait_job(daemon.delegate("log me", script=script, toolsets=["terminal"])["id"])["id"]
    out = daemon.ctl("logs", job)
    assert out.returncode == 0, out.stderr
    lines = [line.split(" ", 1)[1] for line in out.stdout.splitlines()]  # without the time
    assert lines[0].startswith("turn 1: model replied") and lines[0].endswith("calls terminal")
    assert lines[1].startswith("turn 1: terminal {'command': 'echo from-the-tool'} -> ok")
    assert "from-the-tool" in lines[1]
    assert lines[2].endswith("final answer") and lines[3] == "finished: completed (completed) after 2 model calls"
    one = daemon.wait_job(daemon.delegate("say it", script=[{"text": "said"}])["id"])["id"]
    assert daemon.ctl("logs", one).stdout.rstrip().endswith(" finished: completed (completed) after 1 model call")


def test_a_deleted_current_directory_is_a_clean_error(daemon, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m client delegate --background hi'
    out = subprocess.run(["sh", "-c", script], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "current directory no longer exists" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    afile = daemon.work / "a-file"
    afile.write_text("")
    with pytest.raises(ProtocolError, match="is not a directory"):
        daemon.delegate("g", cwd=str(afile))
