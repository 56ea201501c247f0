"""What a systemctl or pueue user expects of ``hermesctl`` and ``hermes-batch`` (real daemon, real CLI).

``--version`` (JSON with ``--json``); click's usage errors in one line; ``--timeout`` after the command too; ``shutdown --wait``; ``--queue`` without
``--background`` and ``--toolsets ""`` refused; ``ps`` escaping control characters as ``events``
does; ``uptime_seconds`` rounded; a request over 16 MiB refused at once as ``too_large``.
"""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
import time

from hermesd import __version__
from hermesd.protocol import EXIT_CODES
from tests.harness import paused_after_first, wait_for
from tests.test_batch_daemon import hermes_batch

LONG = [{"text": "resting", "sleep": 60}]


def test_version_and_timeout_after_the_command(daemon):
    assert daemon.ctl("--version").stdout.strip() == f"hermesctl, version {__version__}"
    assert hermes_batch(daemon, "--version").stdout.strip() == f"hermes-batch, version {__version__}"
    for argv in (["--version", "--json"], ["--json", "--version"]):
        assert json.loads(daemon.ctl(*argv).stdout) == {"version": __version__}
    for argv in (["status", "--timeout", "2"], ["--timeout", "2", "status"], ["ps", "--timeout", "2", "--all"],
                 ["batch", "list", "--timeout", "2"]):
        out = daemon.ctl(*argv)
        assert out.returncode == 0, (argv, out.stderr)
    assert daemon.ctl("status", "--timeout", "0").returncode == 2
    assert daemon.ctl("wait", "nope_1", "--timeout", "1").returncode == EXIT_CODES["not_found"]  # its own --timeout
    uptime = json.loads(daemon.ctl("status", "--json").stdout)["uptime_seconds"]
    assert uptime == round(uptime, 3)


def test_refused_flags_say_why(daemon):
    queue = daemon.ctl("delegate", "--queue", "goal")
    assert queue.returncode == 2 and "--queue needs --background" in queue.stderr
    empty = daemon.ctl("delegate", "--background", "--toolsets", "", "goal")
    assert empty.returncode == 2 and "--toolsets names no toolset" in empty.stderr
    send = daemon.ctl("send", "s", "hi", "--toolsets", " , ")
    assert send.returncode == 2 and "--toolsets names no toolset" in send.stderr
    assert daemon.call("ps", all=True)["jobs"] == []


def test_click_usage_errors_are_one_line_exit_2(daemon):
    """click's own refusals read as every other client error: one line, exit 2 (fast path or not)."""
    for argv, said in ((["usage", "--by", "bogus"], "hermesctl usage: Invalid value for '--by'"),
                       (["delegate", "--max-tokens", "1.5", "g"], "hermesctl delegate: Invalid value for '--max-tokens'"),
                       (["events", "-n", "-2"], "hermesctl events: Invalid value for '--lines'")):
        out = daemon.ctl(*argv)
        assert out.returncode == 2 and out.stderr.startswith(said) and out.stderr.count("\n") == 1, (argv, out.stderr)
    assert daemon.call("ps", all=True)["jobs"] == []


def test_ps_escapes_control_characters(daemon):
    """As ``events`` and ``result`` do: what is there is shown, never what it would do to the terminal."""
    daemon.delegate("red \x1b[31malert\x1b[0m\nsecond line", background=True, script=LONG)
    table = daemon.ctl("ps", env={"COLUMNS": "200"}).stdout
    assert "red \\x1b[31malert\\x1b[0m\\x0asecond line" in table and "\x1b" not in table


def test_a_request_over_16_mib_is_too_large_at_once(daemon, tmp_path):
    goal = tmp_path / "goal.txt"
    goal.write_text("g" * (17 * 1000 * 1000))
    started = time.monotonic()
    out = daemon.ctl("delegate", "--background", "--goal-file", str(goal))
    assert out.returncode == EXIT_CODES["too_large"] and time.monotonic() - started < 10
    assert out.stderr.strip() == ("hermesctl: the 'delegate' request is 17.0 MB (argument 'goal' is 17.0 MB); "
                                  "hermesd accepts requests up to 16 MiB")


def test_shutdown_wait_returns_once_the_daemon_exited(daemon):
    out = subprocess.run([sys.executable, "-m", "client", "shutdown", "--wait"], env=daemon.env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"hermesd (pid {daemon.proc.pid}) stopped"
    assert daemon.proc.poll() is not None  # exited: only the reaping was left to its parent, the test


def test_events_follow_starts_at_the_end_as_journalctl_does(daemon):
    for i in range(3):
        daemon.wait_job(daemon.delegate(f"before {i}")["id"])
    last = daemon.call("events_since", since=0, limit=1)["last_seq"]
    assert [int(x.split()[0]) for x in daemon.ctl("events", "-n", "3").stdout.splitlines()] == [last - 2, last - 1, last]
    follow = subprocess.Popen([sys.executable, "-m", "client", "events", "-f", "-n", "2"], env=daemon.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seqs = [int(follow.stdout.readline().split()[0]) for _ in range(2)]
        assert seqs == [last - 1, last]
        daemon.delegate("after", background=True)
        assert int(follow.stdout.readline().split()[0]) == last + 1  # then the new ones, none skipped
    finally:
        follow.kill()
        follow.wait(10)


def _follower_losing_the_daemon_after_its_first(d, tmp_path, op: str, *args: str):
    """``hermesctl ARGS`` (stdout and stderr to files) that pauses after its first ``op`` answer;
    daemon ``d`` is killed in that pause, and once the follower says it waits for it, started
    again.  Returns ``(follower, stdout file, stderr file)``."""
    slow = tmp_path / "slow"
    slow.mkdir()
    out, err = tmp_path / "follower.out", tmp_path / "follower.err"
    with open(out, "w") as o, open(err, "w") as e:
        follower = subprocess.Popen([sys.executable, "-m", "client", *args], stdout=o, stderr=e,
                                    stdin=subprocess.DEVNULL, env=paused_after_first(d.env, slow, op))
    wait_for((slow / "paused").exists, what="the follower in its window")
    d.kill9()
    wait_for(lambda: "again once it is back" in err.read_text(), what="the follower to say it waits")
    assert follower.poll() is None, err.read_text()
    d.start()
    wait_for(lambda: "hermesd is back; following" in err.read_text(), what="the follower back")
    return follower, out, err


@pytest.mark.parametrize("since", [[], ["--since", "0"]], ids=["the last 10 first", "subscribing next"])
def test_events_follow_waits_for_a_daemon_lost_between_its_first_answer_and_its_subscription(make_daemon, tmp_path,
                                                                                               since):
    d = make_daemon()
    follower, out, err = _follower_losing_the_daemon_after_its_first(d, tmp_path, "events_since", "events", "-f",
                                                                     *since)
    try:
        job = d.delegate("after the restart")["id"]
        wait_for(lambda: job in out.read_text(), what="the new job's events")
        assert follower.poll() is None and "Traceback" not in err.read_text()
        assert "following the events again once it is back" in err.read_text()
    finally:
        follower.kill()
        follower.wait(10)


def test_logs_follow_waits_for_a_daemon_lost_after_its_first_answer(make_daemon, tmp_path):
    d = make_daemon()
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "echo logged"}}]}, *LONG]
    job = d.delegate("resting", background=True, script=script, toolsets=["terminal"], resume=False)["id"]
    wait_for(lambda: d.call("job", id=job)["status"] == "running" and d.call("logs", id=job)["size"],
             what="the job running, its log begun")
    follower, out, err = _follower_losing_the_daemon_after_its_first(d, tmp_path, "job", "logs", "-f", job)
    try:
        assert follower.wait(30) == 0, err.read_text()  # the job ended lost with the daemon: the log is whole
    finally:
        follower.kill()
        follower.wait(10)
    assert d.call("job", id=job)["status"] == "lost"
    assert out.read_text() == (d.home / "jobs" / job / "log").read_text() and "Traceback" not in err.read_text()
    assert f"following the log of {job} again once it is back" in err.read_text()


def _on_a_terminal(daemon, *args: str, env: dict[str, str] | None = None) -> str:
    """What ``hermesctl ARGS`` writes to a terminal (a pty as its stdout), raw."""
    import os
    import pty

    mine, theirs = pty.openpty()
    try:
        subprocess.run([sys.executable, "-m", "client", *args], env={**daemon.env, "TERM": "xterm", **(env or {})},
                       stdout=theirs, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=60)
        os.close(theirs)
        chunks = []
        while True:
            try:
                chunk = os.read(mine, 65536)
            except OSError:  # EIO: the terminal's other side is closed and read to its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(mine)


def test_states_in_colour_on_a_terminal_only(daemon):
    daemon.wait_job(daemon.delegate("done")["id"])
    assert "\x1b[32mcompleted\x1b[0m" in _on_a_terminal(daemon, "ps", "--all")
    assert "\x1b[" not in _on_a_terminal(daemon, "ps", "--all", env={"NO_COLOR": "1"})
    assert "\x1b[" not in daemon.ctl("ps", "--all").stdout  # a pipe: never


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_chat_without_a_terminal_says_at_once_when_the_daemon_dies(make_daemon):
    d = make_daemon(env={"HERMES_SCRIPTED_STEP_SECONDS": "60"})
    chat = subprocess.Popen([sys.executable, "-m", "client", "chat", "main"], env=d.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        chat.stdin.write("talk slowly\n")
        chat.stdin.flush()
        wait_for(lambda: [t for t in d.call("ps", kind="session_turn")["jobs"] if t["status"] == "running"],
                 30, 0.1, "the turn running")
        d.kill9()
        started = time.monotonic()
        line = chat.stderr.readline()
        assert time.monotonic() - started < 5 and "hermesd stopped before it answered 'wait'" in line, line
        rest = chat.communicate(timeout=60)[1]
        assert chat.returncode == EXIT_CODES["daemon_not_running"] and "Traceback" not in rest
        assert rest.strip().endswith("start it with `hermesd run`"), rest
    finally:
        chat.kill()
        chat.wait(10)
