"""hermesctl as a person uses it, in a real terminal (tmux: keys in, screen out):
``chat`` (line editing, history, Ctrl-C and /stop interrupt the turn at once and
the chat goes on, errors keep the prompt, /help), a foreground ``delegate``
(shows that it waits; Ctrl-C says what goes on and how to reach it), and
``top`` on 80×24 (live progress, running jobs in view, asks before it cancels)."""

from __future__ import annotations

import re
import time

import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.harness import wait_for
from tests.terminal import Terminal, hermesctl, need_tmux
from tests.test_sessions import Brain, _daemon


@pytest.fixture
def api():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def terminals(tmp_path):
    """Factory ``terminals(daemon, *args, width, height)`` → a :class:`Terminal` running hermesctl ARGS."""
    need_tmux()
    made: list[Terminal] = []

    def make(daemon, *args: str, width: int = 80, height: int = 24) -> Terminal:
        base = tmp_path / f"tty{len(made)}"
        base.mkdir()
        term = Terminal(base, hermesctl(*args), daemon.env, daemon.work, width, height)
        made.append(term)
        return term

    yield make
    for term in made:
        term.close()


def _turns(daemon) -> list[dict]:
    return daemon.call("ps", all=True, kind="session_turn")["jobs"]


def _chat_with_a_slow_turn(make_daemon, api, terminals) -> tuple:
    """A daemon, a ``chat main`` in a terminal, and the id of the 60 s turn it is running."""
    api.default = Brain(slow_turn=60)
    daemon = _daemon(make_daemon, api)
    term = terminals(daemon, "chat", "main")
    term.wait("you>")
    term.type("talk slowly please")
    turn = wait_for(lambda: [t for t in _turns(daemon) if t["status"] == "running"], 30, 0.1,
                    "the slow turn running")[0]["id"]
    return daemon, term, turn


def test_chat_interrupts_turns_keeps_going_and_edits_lines(make_daemon, api, terminals):
    daemon, term, first = _chat_with_a_slow_turn(make_daemon, api, terminals)
    term.keys("C-c")  # interrupts the turn at once; the chat stays
    started = time.monotonic()
    term.wait("interrupting the turn")
    wait_for(lambda: daemon.call("job", id=first)["status"] == "interrupted", 20, 0.1, "the turn interrupted")
    assert time.monotonic() - started < 15, "Ctrl-C must not wait for the 60 s turn"
    term.wait("[turn interrupted")

    term.type("/nope")  # an error is printed and the prompt stays
    term.wait("error: unknown command '/nope'")
    term.type("/background")
    term.wait("error: usage: /background PROMPT")
    term.type("/help")
    screen = term.wait("Ctrl-C interrupts the running turn")
    assert "/stop — interrupt" in screen and "[exit" not in screen

    term.type("hello there")
    term.wait("agent> echo: hello there")
    term.keys("Up")  # history: the last line comes back, editable
    term.wait(lambda s: s.rstrip().splitlines()[-1] == "you> hello there", what="the recalled line")
    term.keys("C-u")

    term.type("talk slowly again")  # /stop typed while the turn runs is read at once
    second = wait_for(lambda: [t for t in _turns(daemon) if t["status"] == "running" and t["id"] != first],
                      30, 0.1, "the second slow turn")[0]["id"]
    term.type("/stop")
    term.wait(f"stopped {second}")
    wait_for(lambda: daemon.call("job", id=second)["status"] == "interrupted", 20, 0.1, "the turn stopped")

    term.keys("C-c")

    def prompt_again(screen: str) -> bool:  # keys sent before the next prompt reads them can be lost
        lines = screen.rstrip().splitlines()
        return len(lines) >= 2 and "Ctrl-C again, Ctrl-D" in lines[-2] and lines[-1].strip() == "you>"

    term.wait(prompt_again, what="the prompt back after the first Ctrl-C")
    term.keys("C-c")  # the second Ctrl-C at the prompt leaves
    term.wait("[exit 0]")


def test_foreground_delegate_shows_it_waits_and_ctrl_c_says_how_to_reach_it(make_daemon, api, terminals):
    api.default = Brain(child_delay=60)
    daemon = _daemon(make_daemon, api)
    term = terminals(daemon, "delegate", "a slow goal")
    screen = term.wait("model call")
    job = re.search(r"waiting for (deleg_\w+): (starting|running)", screen).group(1)
    term.wait(lambda s: re.search(r"running · [1-9]\d*s ·", s), what="elapsed time rising")
    term.keys("C-c")
    screen = term.wait("[exit 130]")
    assert f"stopped watching; {job} goes on in hermesd" in screen
    assert f"hermesctl wait {job}" in screen and f"hermesctl cancel {job}" in screen
    assert daemon.call("job", id=job)["status"] == "running"
    daemon.call("cancel", id=job)


def test_top_fits_80x24_shows_progress_and_asks_before_cancelling(daemon, terminals):
    dataset = daemon.work / "prompts.jsonl"
    dataset.write_text("".join(f'{{"prompt": "say {i}"}}\n' for i in range(30)))
    batch = daemon.call("batch.run", run_name="many", dataset_file=str(dataset), batch_size=10, num_workers=4)
    assert daemon.wait_job(batch["id"], 120)["status"] == "completed"
    script = [{"text": "look", "tool_calls": [{"name": "terminal", "input": {"command": "true"}}]},
              {"text": "again", "tool_calls": [{"name": "terminal", "input": {"command": "true"}}]},
              {"text": "and rest", "sleep": 60}]
    long = daemon.delegate("the long one", background=True, script=script, toolsets=["terminal"])["id"]

    term = terminals(daemon, "top")
    screen = term.wait(lambda s: re.search(rf"{long}  running  \d+s  the long one  · [23] calls", s)
                       and re.search(r"up \d+s — 1 running, 0 queued", s), 30,
                       what="the running job with its goal, calls and elapsed time, above the fold, and the headline")
    assert all(len(line) <= 80 for line in screen.splitlines()) and len(screen.splitlines()) <= 24
    assert "palette" not in screen and "⭘" not in screen and "▊" not in screen, "no stray glyphs"
    assert re.search(r"up \d+s — 1 running, 0 queued", screen), "the headline whole"
    assert screen.index(long) < screen.index(batch["id"]), "running jobs come before finished ones"
    term.wait(lambda s: re.search(rf"{long}  running  ([2-9]|\d\d)s", s), what="elapsed time rising")

    term.keys("c")
    term.wait(f"Cancel {long}?")
    term.keys("n")
    term.wait(lambda s: f"Cancel {long}?" not in s, what="the question gone")
    time.sleep(0.5)
    assert daemon.call("job", id=long)["status"] == "running"
    term.keys("c")
    term.wait(f"Cancel {long}?")
    term.keys("y")
    wait_for(lambda: daemon.call("job", id=long)["status"] == "cancelled", 20, 0.1, "the job cancelled")
    term.wait(f"{long}  cancelled")
    term.keys("q")
    term.wait("[exit 0]")


LONG_GOAL = "refactor the billing module so that every provider's price table is read once and cached"


def test_top_at_80x24_keeps_calls_and_cost_on_every_running_jobs_row(make_daemon, terminals):
    daemon = make_daemon(env={"HERMES_SCRIPTED_STEP_SECONDS": "30"})  # batch items: a step every 30 s
    dataset = daemon.work / "prompts.jsonl"
    dataset.write_text("".join(f'{{"prompt": "{i}: {LONG_GOAL}"}}\n' for i in range(2)))
    batch = daemon.call("batch.run", run_name="wide", dataset_file=str(dataset), batch_size=2, num_workers=2)["id"]
    done = daemon.delegate("quick", script=[{"text": "ok", "sleep": 0}])["id"]
    assert daemon.wait_job(done)["status"] == "completed"
    script = [{"text": "look", "sleep": 0, "tool_calls": [{"name": "terminal", "input": {"command": "true"}}]},
              {"text": "and rest", "sleep": 60}]
    long = daemon.delegate(LONG_GOAL, background=True, script=script, toolsets=["terminal"])["id"]
    wait_for(lambda: len([j for j in daemon.call("ps")["jobs"] if j["status"] == "running"]) == 4, 60, 0.1,
             "the job, the batch and its two items running")
    running = [j["id"] for j in daemon.call("ps")["jobs"] if j["status"] == "running"]

    term = terminals(daemon, "top")
    row = r"  running  \d+s  (.*  )?· \d+ calls?  (\$[\d.]+|unknown|-)"
    screen = term.wait(lambda s: re.search(rf"{long}  running  \d+s  refactor.*  · 1 call  (\$[\d.]+|unknown)", s)
                       and all(re.search(job + row, s) for job in running), 30,
                       what="every running job's row with its calls and cost")
    assert all(len(line) <= 80 for line in screen.splitlines()) and len(screen.splitlines()) <= 24
    assert screen.index(long) < screen.index(done), "running jobs before finished ones"
    assert batch in screen
    term.keys("q")
    term.wait("[exit 0]")


def test_chat_says_at_once_when_the_daemon_dies_mid_turn(make_daemon, api, terminals):
    daemon, term, turn = _chat_with_a_slow_turn(make_daemon, api, terminals)
    daemon.kill9()
    started = time.monotonic()
    screen = term.wait("the session and its history are kept]", timeout=10)
    assert time.monotonic() - started < 5, "said at once, not at the turn's end"
    assert f"the turn {turn} goes on, or ends lost, once hermesd is back; start it with `hermesd run`" in screen
    daemon.start()
    term.wait("[hermesd is back: go on]")
