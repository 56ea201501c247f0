"""A step is never taken unjournalled (found by the soak, issue 44, seed 44).

``HERMES_HOME/jobs`` (where the journals are) is a small tmpfs (root only) that a ballast file
fills while a job's first terminal command runs, so the child cannot write that command's result
to its journal; the state database stays writable, so the child's reports are seen meanwhile
(a full ``HERMES_HOME`` holds them back: :mod:`tests.chaos.test_disk`).  The child waits,
reporting "waiting to write its journal: …" as its activity, and goes on once the ballast is
gone: each command ran once.  hermesd ``kill -9``ed while the child waits: the resumed job gets
"effect unknown" for that command and never runs it again.  A disk full for longer than the
stale limit: the job fails naming its journal, and nothing more ran.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from bench.soak.faults import fill
from child.journal import INTERRUPTED
from tests.chaos.helpers import mounted, notifications, running_job
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, tool_use_block
from tests.harness import wait_for

COMMANDS = 2
WAITING = "waiting to write its journal: No space left on device"


class Brain:
    """Command ``k`` (``echo k >> SIDE``, the first after a pause) while the conversation holds
    ``k - 1`` tool results, then the final answer; ``calls`` counts requests."""

    def __init__(self, side: Path):
        self.side, self.calls, self.lock = side, 0, threading.Lock()

    def __call__(self, request):
        with self.lock:
            self.calls += 1
        results = sum(1 for msg in request.body["messages"] if isinstance(msg["content"], list)
                      for b in msg["content"] if b.get("type") == "tool_result")
        if results < COMMANDS:
            command = f"echo {results + 1} >> {self.side}"
            if results == 0:  # its result (8 KiB: a new page of the journal's file) waits for the ballast to go
                command = f"sleep 3; {command}; head -c 8192 /dev/zero | tr '\\0' x"
            return Message([tool_use_block("terminal", {"command": command})], stop_reason="tool_use")
        return Message([text_block("finished")])


def _entries(home: Path, job: str) -> list[dict[str, Any]]:
    path = home / "jobs" / job / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


def _waiting_reported(d, job: str) -> bool:
    events = d.call("events_since", since=0, types=["job.progress"], limit=10000)["events"]
    return any(e["job"] == job and e["data"].get("activity") == WAITING for e in events)


def _unknown_results(api) -> int:
    return len({b["tool_use_id"] for r in api.requests for msg in r.body["messages"] if isinstance(msg["content"], list)
                for b in msg["content"] if b.get("type") == "tool_result" and INTERRUPTED in str(b.get("content"))})


def _job_on_a_full_disk(d, api) -> tuple[str, Path]:
    """Start the job, fill the disk while its first command runs, wait until the child says it waits
    for its journal; returns the job and the ballast (remove it to free the disk)."""
    job = d.delegate("append lines", background=True, toolsets=["terminal"])["id"]
    running_job(d, job)
    wait_for(lambda: [e["t"] for e in _entries(d.home, job)][-1:] == ["tool_started"], 60, 0.02,
             "the first command running")
    ballast = d.home / "jobs" / "ballast"
    fill(ballast)
    wait_for(lambda: _waiting_reported(d, job), 30, 0.1, "the child waiting to write its journal")
    assert api.default.calls == 1 and side_lines(d) == ["1"]  # the next model call waits for the journal
    return job, ballast


def side_lines(d) -> list[str]:
    """The lines the commands appended to their side-effect file."""
    path = d.work / "side-effects"
    return path.read_text().split() if path.exists() else []


@contextlib.contextmanager
def _daemon(make_daemon, config: dict[str, Any] | None = None):
    """A daemon whose jobs' folders (``HERMES_HOME/jobs``, where the journals are) are a small tmpfs:
    the state database stays writable, so the child's reports can be seen while its disk is full."""
    with FakeAnthropic() as api:
        d = make_daemon({"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal"], **(config or {})},
                        {"ANTHROPIC_API_KEY": "test-key"}, start=False)
        api.default = Brain(d.work / "side-effects")
        (d.home / "jobs").mkdir(mode=0o700)
        with mounted("tmpfs", d.home / "jobs", "mode=700"):
            try:
                yield d.start(), api
            finally:
                d.cleanup()


@pytest.mark.parametrize("kill", [False, True], ids=["freed", "kill9"])
def test_a_full_disk_holds_the_run_until_its_journal_is_written(make_daemon, kill):
    with _daemon(make_daemon) as (d, api):
        job, ballast = _job_on_a_full_disk(d, api)
        if kill:  # the first command ran, its result is not on disk
            d.kill9()
        ballast.unlink()
        if kill:
            d.start()
        final = d.wait_job(job, timeout=90)
        assert final["status"] == "completed" and final["summary"] == "finished", final
        assert side_lines(d) == [str(k) for k in range(1, COMMANDS + 1)]  # each command once
        assert _unknown_results(api) == (1 if kill else 0)
        assert api.default.calls <= COMMANDS + 1 + (1 if kill else 0), api.default.calls
        assert notifications(d) == {job: 1}


def test_a_journal_unwritable_for_the_stale_limit_fails_the_job_naming_it(make_daemon):
    with _daemon(make_daemon, {"delegation": {"stale_after_seconds": 8}}) as (d, api):
        job, ballast = _job_on_a_full_disk(d, api)
        final = d.wait_job(job, timeout=60)
        ballast.unlink()
        journal = d.home / "jobs" / job / "journal.jsonl"
        assert final["status"] == "failed" and final["exit_reason"] == "journal", final
        assert f"its journal {journal} could not be written for 8s: No space left on device" in final["error"]
        assert api.default.calls == 1 and side_lines(d) == ["1"]
        assert notifications(d) == {job: 1}
