"""The model server misbehaves: 429, 529 and 500 replies, a stream that breaks,
a server that never answers.  Transient errors are retried and the job
completes; persistent ones end the job ``failed`` with a clear error; a hung
server ends it ``timed_out`` at the child's wall clock.  Nothing is left
running and the daemon stays up.

One daemon and one fake Messages API serve every scenario at once; the fake
answers by the job's goal and counts the attempts per goal.  The children are
warm (forked with the SDK imported), so the wall clock measures the model
calls, not ``import anthropic`` on a loaded machine.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tests.chaos.helpers import assert_no_leftovers, delegate_warm, forkserver, warm_on_start
from tests.fakes.anthropic_server import Error, FakeAnthropic, Message, StreamFailure, last_user_text, text_block

TIMEOUT = 8.0
"""``delegation.child_timeout_seconds`` of the daemon under test."""


class Hang:
    """A reply that never comes (cut short when the server closes)."""

    def write(self, out, request) -> None:
        """Wait for ever, then fail."""
        out.wait(3600)
        Error(500, "too late").write(out, request)


def _error(status: int) -> Error:
    return Error(status, f"fake {status}", headers={"retry-after-ms": "20"})


# goal -> the replies of attempts 1, 2, … (the last one repeats)
SCENARIOS = {
    "transient": [_error(429), _error(529), _error(500), Message([text_block("recovered")])],
    "overloaded": [_error(529)],
    "rate limited": [_error(429)],
    "server error": [_error(500)],
    "broken stream": [StreamFailure([text_block("partial")]), Message([text_block("recovered")])],
    "hung server": [Hang()],
}


class Brain:
    """Answers each scenario's attempts in turn; ``attempts`` counts them per goal."""

    def __init__(self):
        self.attempts: Counter = Counter()
        self.lock = threading.Lock()

    def __call__(self, request):
        goal = last_user_text(request)
        with self.lock:
            self.attempts[goal] += 1
            n = self.attempts[goal]
        replies = SCENARIOS[goal]
        return replies[min(n, len(replies)) - 1]


@pytest.fixture
def api():
    with FakeAnthropic() as server:
        server.default = Brain()
        yield server


def test_model_server_errors_and_timeouts(make_daemon, api):
    config = {"provider": "anthropic", "base_url": api.url, "toolsets": [],
              "delegation": {"child_timeout_seconds": TIMEOUT},
              # every scenario at once: the hanging ones must not hold the governor's initial window
              "rate_limits": {"anthropic": {"max_concurrent": 16}}}
    d = warm_on_start(make_daemon(forkserver(config), {"ANTHROPIC_API_KEY": "test-key"}, start=False)).start()
    recs = {goal: delegate_warm(d, goal, toolsets=[]) for goal in SCENARIOS}
    final = {goal: d.wait_job(rec["id"], timeout=120) for goal, rec in recs.items()}
    attempts = api.default.attempts
    summary = {g: (f["status"], attempts[g], (f["error"] or "")[:120]) for g, f in final.items()}

    for goal in ("transient", "broken stream"):
        assert final[goal]["status"] == "completed" and final[goal]["summary"] == "recovered", summary
    assert attempts["transient"] == 4, summary
    assert attempts["broken stream"] == 2, summary
    for goal in ("overloaded", "rate limited"):  # "not now" is never a failure while the deadline allows
        job = final[goal]
        assert (job["status"], job["exit_reason"]) == ("timed_out", "timeout"), summary
        assert attempts[goal] >= 2, f"{goal} was not asked again: {summary}"
    job = final["server error"]  # retried after 1 and 4 s, while the others' refusals pause the endpoint
    assert attempts["server error"] >= 2, f"server error was not retried: {summary}"
    assert job["status"] == "timed_out" or (
        job["status"] == "failed" and any(w in job["error"].lower() for w in ("500", "api_error", "server"))), summary
    hung = final["hung server"]
    assert hung["status"] == "timed_out" and hung["exit_reason"] == "timeout", summary
    assert hung["duration_seconds"] < TIMEOUT + 10, summary
    assert_no_leftovers(d, {r["id"] for r in recs.values()})
    assert d.call("hello")["pid"] == d.proc.pid
