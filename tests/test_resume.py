"""Nothing in flight is lost: jobs running when hermesd dies (``kill -9``) or stops (SIGTERM)
resume from their journal in a new child at the next start, with real daemons and the fake
Messages API counting every model call.

Each job is three model turns: a terminal command in turns 1 and 2, then the final answer.
The daemon is killed while the first command runs, so that command's result is "interrupted
by a restart" and the job needs exactly two more model calls; a repeated call is allowed once
per job and restart (a reply in flight when the child died is paid again).
"""

from __future__ import annotations

import contextlib
from datetime import datetime
import json
import sqlite3
import threading
from typing import Any

import pytest

from child.journal import INTERRUPTED
from tests.chaos.helpers import forkserver, notifications
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, tool_use_block
from tests.harness import DaemonProc, wait_for

TURNS = 3
COMMAND = "sleep 4; echo turn"
pytestmark = pytest.mark.slow


class Brain:
    """Answers by the conversation: a command until it holds ``TURNS - 1`` tool results
    since its last plain user message, then the final answer; ``calls`` counts requests."""

    def __init__(self):
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, request):
        with self.lock:
            self.calls += 1
        results = 0
        for message in request.body["messages"]:
            blocks = message["content"] if isinstance(message["content"], list) else [{"type": "text"}]
            if message["role"] == "user":
                results = results + 1 if any(b["type"] == "tool_result" for b in blocks) else 0
        if results < TURNS - 1:  # a goal marked [long] waits longer: its job is not resumed
            command = "sleep 60" if "[long]" in json.dumps(request.body["messages"][0]) else COMMAND
            return Message([tool_use_block("terminal", {"command": command})], stop_reason="tool_use")
        return Message([text_block("finished")])


@pytest.fixture
def api():
    with FakeAnthropic() as server:
        server.default = Brain()
        yield server


def _daemon(make_daemon, api, **config: Any) -> DaemonProc:
    cfg = {"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal"], **config}
    return make_daemon(forkserver(cfg), {"ANTHROPIC_API_KEY": "test-key"})


def _journal(d: DaemonProc, job: str) -> list[dict[str, Any]]:
    path = d.home / "jobs" / job / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _in_tool(d: DaemonProc, jobs: list[str], started: int = 1) -> None:
    """Wait until each job's journal says its ``started``-th tool call runs (and has no result)."""
    def running() -> bool:
        for job in jobs:
            kinds = [e["t"] for e in _journal(d, job)]
            if kinds.count("tool_started") < started or kinds[-1] != "tool_started":
                return False
        return True

    wait_for(running, 90, 0.05, f"every job in its tool call {started}")


def _interrupted_results(api) -> int:
    return sum(1 for r in api.requests for msg in r.body["messages"][-1:] if isinstance(msg["content"], list)
               for b in msg["content"] if b.get("type") == "tool_result" and INTERRUPTED in str(b.get("content")))


def _check_resumed(d: DaemonProc, api, jobs: list[str], resumes: int = 1) -> None:
    for job in jobs:
        final = d.wait_job(job, timeout=120)
        assert final["status"] == "completed" and final["summary"] == "finished", final
        assert final["resumes"] == resumes and final["resumed_at"], final
        assert final["api_calls"] >= TURNS, final  # the earlier children's calls counted too
        ran = (datetime.fromisoformat(final["completed_at"]) - datetime.fromisoformat(final["resumed_at"])).total_seconds()
        assert final["duration_seconds"] > ran, final  # since its first start, not only the last child's
        with contextlib.closing(sqlite3.connect(d.home / "state.db")) as db:  # and billed once
            billed = db.execute("SELECT SUM(input), SUM(output) FROM spend WHERE job = ?", (job,)).fetchone()
        assert billed == (final["tokens"]["input"], final["tokens"]["output"]), (billed, final["tokens"])
    assert api.default.calls <= TURNS * len(jobs) + resumes * len(jobs), api.default.calls
    assert _interrupted_results(api) >= len(jobs)  # each first command was cut off by the restart


@pytest.mark.parametrize("stop", ["kill9", "sigterm"])
def test_three_background_jobs_resume_after_a_restart(make_daemon, api, stop):
    d = _daemon(make_daemon, api)
    jobs = [d.delegate(f"job {i}", background=True, toolsets=["terminal"])["id"] for i in range(3)]
    _in_tool(d, jobs)
    d.kill9() if stop == "kill9" else d.stop()
    d.start()
    _check_resumed(d, api, jobs)
    assert notifications(d) == {job: 1 for job in jobs}
    assert "resumed: 1 time after a restart" in d.ctl("result", jobs[0]).stdout
    assert "completed (resumed 1)" in d.ctl("ps", "--all").stdout


def test_a_second_kill_during_the_resume_loses_nothing_more(make_daemon, api):
    d = _daemon(make_daemon, api)
    job = d.delegate("twice", background=True, toolsets=["terminal"])["id"]
    _in_tool(d, [job])
    d.kill9()
    d.start()
    _in_tool(d, [job], started=2)  # the resumed child is in its next command
    d.kill9()
    d.start()
    _check_resumed(d, api, [job], resumes=2)
    assert notifications(d) == {job: 1}


def test_a_session_turn_resumes_and_its_messages_are_stored_once(make_daemon, api):
    d = _daemon(make_daemon, api)
    turn = d.call("session.send", session="s", text="work on it", cwd=str(d.work))["turn"]["id"]
    _in_tool(d, [turn])
    d.kill9()
    d.start()
    _check_resumed(d, api, [turn])
    history = d.call("session.history", session="s")["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant", "user", "assistant"]


def test_without_resume_or_without_its_journal_a_job_is_lost(make_daemon, api):
    d = _daemon(make_daemon, api)
    kept = d.delegate("not resumed [long]", background=True, toolsets=["terminal"], resume=False)["id"]
    gone = d.delegate("journal removed [long]", background=True, toolsets=["terminal"])["id"]
    _in_tool(d, [kept, gone])
    d.kill9()
    (d.home / "jobs" / gone / "journal.jsonl").unlink()
    d.start()
    final = d.wait_job(kept, timeout=30)
    assert final["status"] == "lost" and not final["resumes"], final
    assert final["error"].endswith("not resumed: it was submitted with --no-resume (resume: false)"), final
    missing = d.wait_job(gone, timeout=30)
    assert missing["status"] == "lost" and "journal" in missing["error"] and "missing" in missing["error"], missing
    assert notifications(d) == {kept: 1, gone: 1}
