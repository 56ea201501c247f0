"""The governor's parts without a daemon: headers, the limiter on a driven clock, the config."""

from __future__ import annotations

import datetime

import pytest

from child.governor import limit_headers
from hermesd import config
from hermesd.governor import headers
from hermesd.governor.limiter import FORGET_SECONDS, INITIAL_WINDOW, STALE_SECONDS, Grant, Limiter
from hermesd.governor.service import Governor


def _iso(seconds_from_now: float, now: float) -> str:
    when = datetime.datetime.fromtimestamp(now + seconds_from_now, datetime.timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def test_headers_anthropic_openai_and_retry_after():
    now = 1_800_000_000.0
    learned = headers.read({"Retry-After": "7", "anthropic-ratelimit-requests-limit": "50",
                            "anthropic-ratelimit-requests-remaining": "0",
                            "anthropic-ratelimit-requests-reset": _iso(12, now),
                            "anthropic-ratelimit-input-tokens-remaining": "900", "request-id": "x"}, now)
    assert learned.retry_after == 7.0
    assert learned.dims["requests"] == headers.Dim(50, 0, 12.0, 1.0)  # a time in whole seconds
    assert learned.dims["input_tokens"].remaining == 900 and learned.exhausted_for() == 12.0
    assert headers.read({"retry-after-ms": "1500", "retry-after": "9"}, now).retry_after == 1.5
    openai = headers.read({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s",
                           "x-ratelimit-reset-requests": "12ms"}, now)
    assert openai.dims["tokens"] == headers.Dim(None, 0, 360.0, 1.0) and openai.dims["requests"].reset == 0.012
    assert openai.dims["requests"].resolution == 0.001
    assert headers.read({"retry-after": "garbage", "x-ratelimit-reset-tokens": "soon"}, now) == headers.Learned()
    assert limit_headers({"Retry-After": "1", "x-api-key": "secret", "anthropic-ratelimit-tokens-limit": "5"}) == {
        "retry-after": "1", "anthropic-ratelimit-tokens-limit": "5"}


def test_configured_requests_are_spread_over_the_minute():
    limiter = Limiter("x", rpm=120, now=0.0)
    limiter.window = 8.0  # past the slow start
    assert all(isinstance(limiter.ask("j", f"g{i}", 10, 100, 0.0), Grant) for i in (1, 2))  # a second's worth
    wait, reason = limiter.ask("j", "g3", 10, 100, 0.0)
    assert 0.5 <= wait <= 0.56 and "requests per minute" in reason  # then 2 a second
    assert isinstance(limiter.ask("j", "g3", 10, 100, 0.5), Grant)


def test_output_tokens_are_reserved_by_max_tokens_and_given_back():
    limiter = Limiter("x", otpm=600, now=0.0)  # 10 a second
    assert isinstance(limiter.ask("j", "g1", 1, 10, 0.0), Grant)
    assert not isinstance(limiter.ask("j", "g2", 1, 10, 0.0), Grant)
    limiter.done("g1", "ok", headers.Learned(), {"output": 2}, 0.0)  # 8 unused come back
    assert not isinstance(limiter.ask("j", "g2", 1, 10, 0.0), Grant)
    assert isinstance(limiter.ask("j", "g2", 1, 10, 0.2), Grant)


def test_a_429_pauses_everyone_for_retry_after_and_halves_the_window():
    limiter = Limiter("x", max_concurrent=8, now=0.0)
    limiter.window = 8.0
    grant = limiter.ask("a", "g1", 1, 1, 0.0)
    limiter.done(grant.id, "rate_limited", headers.Learned(retry_after=5.0), {}, 0.0)
    wait, reason = limiter.ask("b", "g2", 1, 1, 1.0)
    assert 4.0 <= wait <= 4.5 and "429" in reason and "retry-after 5s" in reason
    assert limiter.window == 4.0
    assert isinstance(limiter.ask("b", "g2", 1, 1, 5.01), Grant)
    for i in range(8):
        limiter.done("g2" if i == 0 else "none", "ok", headers.Learned(), {}, 6.0)
    assert 5.0 < limiter.window <= 6.0  # additive increase: 1/window per success


def test_slow_start_from_the_initial_window_then_one_more_per_success():
    limiter = Limiter("x", now=0.0)
    limiter.max_concurrent = 6  # the ceiling, not configured at the start
    grants = [limiter.ask("a", f"g{i}", 1, 1, 0.0) for i in range(int(INITIAL_WINDOW))]
    assert all(isinstance(g, Grant) for g in grants)
    wait, reason = limiter.ask("a", "gx", 1, 1, 0.0)
    assert wait < 0.3 and f"{int(INITIAL_WINDOW)} calls in flight" in reason
    limiter.done(grants[0].id, "ok", headers.Learned(), {}, 0.1)
    assert [isinstance(limiter.ask("a", f"h{i}", 1, 1, 0.1), Grant) for i in (1, 2, 3)] == [True, True, False]
    for grant in grants[1:]:
        limiter.done(grant.id, "ok", headers.Learned(), {}, 0.2)
    assert limiter.window == 6.0  # at max_concurrent
    assert Limiter("y", max_concurrent=2, now=0.0).window == 2.0  # a configured one is where it starts
    assert Limiter("z", max_concurrent=32, now=0.0).window == 32.0


def test_no_retry_after_backs_off_exponentially():
    limiter = Limiter("x", now=0.0)
    for expected in (1.0, 2.0, 4.0):
        grant = limiter.ask("a", "g", 1, 1, limiter.paused_until)
        limiter.done(grant.id, "overloaded", headers.Learned(), {}, limiter.paused_until)
        assert limiter.paused_until - grant.at == expected


def test_headers_with_nothing_remaining_wait_for_the_next_unit_not_the_reset_counting_later_grants():
    limiter = Limiter("x", now=0.0)
    limiter.window = 8.0
    first = limiter.ask("a", "g1", 1, 1, 0.0)
    second = limiter.ask("a", "g2", 1, 1, 0.0)
    # the first call's response: 1 of 20 requests remains, the bucket full in 10 s (one every ~0.5 s);
    # the second was granted since: nothing remains
    limiter.done(first.id, "ok", headers.Learned(dims={"requests": headers.Dim(20, 1, 10.0, 1.0)}), {}, 0.1)
    wait, reason = limiter.ask("a", "g3", 1, 1, 0.1)
    assert 0.5 <= wait <= 0.6 and "no requests remain until its bucket refills" in reason
    told = limiter.describe(0.1)["remaining"]["requests"]  # status (and the dashboard) shows what is left
    assert told["limit"] == 20 and told["remaining"] == 0
    assert isinstance(limiter.ask("a", "g3", 1, 1, 0.1 + wait), Grant) and second.id in limiter.in_flight
    assert not isinstance(limiter.ask("a", "g4", 1, 1, 0.2 + wait), Grant)  # the unit it took


def test_governor_keys_waiting_forget_and_ledger():
    clock = [0.0]
    gov = Governor(lambda p, e: (None, None, None, 1), clock=lambda: clock[0])
    go = gov.grant("j1", "anthropic", "http://h", "abcdef0123", "m", 10, 5)
    assert "grant" in go
    wait = gov.grant("j2", "anthropic", "http://h", "abcdef0123", "m", 10, 5)
    assert wait["wait"] > 0 and "(1 call in flight)" in wait["reason"] and gov.waiting_for("j2")
    assert "grant" in gov.grant("j3", "anthropic", "http://h", "other-key", "m", 10, 5)  # another key, another limiter
    assert gov.describe()[0]["waiting"] == ["j2"] and "key abcdef01" in gov.describe()[0]["endpoint"]
    gov.grant("j4", "openai-compat", "https://me:secret@api.example.com/v1", "", "m", 10, 5)
    assert gov.describe()[-1]["endpoint"] == "openai-compat https://api.example.com/v1"  # no password shown
    gov.forget("j1")
    assert "grant" in gov.grant("j2", "anthropic", "http://h", "abcdef0123", "m", 10, 5)

    class Ledger:
        settled: list = []

        def reserve(self, job_id, model, provider, max_tokens, input_estimate, *, grant_id=None):
            return {"error": "budget b exceeded", "budget": "b", "spent": 1.0, "limit": 1.0} if job_id == "poor" else None

        def settle(self, job_id, grant_id, model, usage):
            self.settled.append((job_id, grant_id, usage))

    gov.ledger = Ledger()
    refused = gov.grant("poor", "openai-compat", "http://o", "", "m", 10, 5)
    assert refused["refused"] == "budget_exceeded" and refused["budget"] == "b"
    ok = gov.grant("rich", "openai-compat", "http://o", "", "m", 10, 5)
    gov.done("rich", ok["grant"], "ok", {}, {"input": 3, "output": 4}, "m")
    assert Ledger.settled == [("rich", ok["grant"], {"input": 3, "output": 4})]


def test_config_rate_limits_and_errors(tmp_path):
    cfg = config.parse("rate_limits:\n  anthropic:\n    requests_per_minute: 50\n"
                       "  https://api.example.com/v1/:\n    max_concurrent: 4\n    input_tokens_per_minute: 1000\n")
    assert cfg.rate_limits["anthropic"].requests_per_minute == 50
    assert cfg.rate_limits["https://api.example.com/v1"].max_concurrent == 4
    data = {k: v for k, v in cfg.to_dict().items() if k != "source"}
    assert config.from_data(data).rate_limits == cfg.rate_limits  # the daemon process gets it so
    with pytest.raises(config.ConfigError) as err:
        config.parse("model: x\nrate_limits:\n  anthropic:\n    requests_per_minute: 0\n"
                     "  ftp://nope:\n    max_concurrent: 2\n  openai-compat:\n    burst: 3\n", "c.yaml")
    problems = [str(p) for p in err.value.problems]
    assert problems[0].startswith("c.yaml:4: rate_limits.anthropic.requests_per_minute: must be a number >= 0.001")
    assert problems[1].startswith("c.yaml:5: rate_limits.ftp://nope: must be a provider")
    assert problems[2].startswith("c.yaml:8: rate_limits.openai-compat.burst: unknown key")
    with pytest.raises(config.ConfigError, match="rate_limits: must be a mapping"):
        config.parse("rate_limits: [1]\n")


def test_a_child_without_a_governor_paces_itself():
    """An item on a Ray cluster: its channel answers no ``child.grant``; a 429 is waited out here."""
    import time

    from child.__main__ import StopFlag
    from child.activity import Activity
    from child.governor import Grants
    from child.item import FileChannel

    class Metered:
        name, model, endpoint, key_id = "anthropic", "m", "http://h", ""

    reports: list[str] = []
    stop = StopFlag()
    grants = Grants(FileChannel("/nonexistent"), Metered(), stop, Activity(reports.append), reports.append)
    assert grants.acquire(10, 5) == "" and not grants.asking
    started = time.monotonic()
    grants.done("", "rate_limited", retry_after=0.3)
    assert time.monotonic() - started >= 0.3
    assert any(r.startswith("waiting for the provider's rate limit") for r in reports)
    stop.set("SIGTERM")
    assert grants.acquire(10, 5) is None


def test_status_ps_and_top_say_who_waits_and_why():
    from client import render
    from client.top_board import Board

    limiter = {"endpoint": "anthropic https://api.anthropic.com key 3f2a9c01", "in_flight": 2, "concurrency": 4.0,
               "paused_seconds": 3.5, "reason": "the provider answered rate limit (429), retry-after 4s",
               "waiting": ["bg_1", "bg_2"], "calls": {"ok": 9, "rate_limited": 1}, "configured": {}}
    line, = render.governor_lines([limiter])
    assert "PAUSED 3.5s: the provider answered rate limit (429)" in line and "waiting: bg_1, bg_2" in line
    waiting = {"endpoint": limiter["endpoint"], "reason": limiter["reason"], "seconds": 3.5, "since": 0}
    assert render.waiting_text({"waiting": waiting}).startswith("[waiting 3.5s for anthropic https://api.anthropic.com")
    board = Board()
    board.status = {"caps": {}, "governor": [limiter]}
    board.add_jobs([{"id": "bg_1", "status": "running", "kind": "background", "goal": "g"}])
    board.apply({"type": "job.progress", "job": "bg_1", "seq": 1, "data": {
        "turn": 2, "activity": "waiting for the provider's rate limit: anthropic https://api.anthropic.com: 429"}})
    assert "waiting for the provider's rate limit" in board.jobs["bg_1"]["last_activity"][1]
    assert any("PAUSED" in c for c in board.caps())


def test_waiters_are_served_in_the_order_they_first_asked():
    """The case of 1 request per 20 s: a, b, c ask at once, d 16 s later; whoever comes back
    first, b goes before c and c before d (a late job does not jump the queue)."""
    limiter = Limiter("x", rpm=3, now=0.0)
    granted = []

    def ask(job, now):
        answer = limiter.ask(job, f"{job}{now}", 1, 1, now)
        if isinstance(answer, Grant):
            granted.append(job)
            limiter.done(answer.id, "ok", headers.Learned(), {"output": 1}, now)
        return answer

    for job in "abc":
        ask(job, 0.0)
    wait, reason = ask("d", 16.0)
    assert granted == ["a"] and 0.2 <= wait and "served in order" in reason
    for now in (20.5, 21.0, 30.0, 40.8, 41.2, 50.0, 61.0, 62.0, 70.0):
        for job in "dcb":  # the later waiters always ask first
            if job not in granted:
                ask(job, now)
    assert granted == ["a", "b", "c", "d"]


def test_a_waiter_that_stops_asking_is_passed_over_then_forgotten():
    limiter = Limiter("x", rpm=3, now=0.0)
    assert isinstance(limiter.ask("a", "g1", 1, 1, 0.0), Grant)
    wait, _ = limiter.ask("b", "g2", 1, 1, 1.0)  # b waits, then never asks again
    assert not isinstance(limiter.ask("c", "g3", 1, 1, 1.0), Grant)
    assert isinstance(limiter.ask("c", "g3", 1, 1, 1.0 + wait + STALE_SECONDS + 1), Grant)  # b passed over
    assert "b" in limiter.queue and limiter.head(1.0 + wait + FORGET_SECONDS + 1) is None and "b" not in limiter.queue


def test_each_pause_is_announced_once_when_it_begins_headers_or_429():
    clock, wall, pauses = [0.0], 1_000_000.0, []
    gov = Governor(lambda p, e: (None, None, None, None), clock=lambda: clock[0], wall=lambda: wall,
                   on_pause=lambda limiter, seconds, reason: pauses.append((round(seconds), reason)))
    none_left = {"anthropic-ratelimit-requests-limit": "5", "anthropic-ratelimit-requests-remaining": "0",
                 "anthropic-ratelimit-requests-reset": _iso(20, wall)}
    first = gov.grant("a", "anthropic", "http://h", "k", "m", 10, 5)["grant"]
    gov.done("a", first, "ok", none_left, {"output": 1}, "m")  # no 429: the headers say none remain
    assert pauses == [(4, "the provider says no requests remain until its bucket refills")]  # 5 per 20 s
    for job in "bcd":
        clock[0] += 1.0
        assert "wait" in gov.grant(job, "anthropic", "http://h", "k", "m", 10, 5)
    assert len(pauses) == 1  # not one per call while paused, nor per unit until the bucket is full again
    clock[0] = 25.0  # the reset passed: a 429 starts a new pause
    refused = gov.grant("b", "anthropic", "http://h", "k", "m", 10, 5)["grant"]
    gov.done("b", refused, "rate_limited", {"retry-after": "7"}, {}, "m")
    assert pauses[1:] == [(7, "the provider answered rate limit (429), retry-after 7s")]
