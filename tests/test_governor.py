"""The governor with a real daemon, real children and the real SDKs against fakes that say no."""

from __future__ import annotations

import pytest

import json
import re
import threading
import time

from tests.fakes.anthropic_server import Error, FakeAnthropic, Message, text_block, thinking_block, tool_use_block
from tests.fakes.limits import Limits
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import wait_for
from tests.test_batch_daemon import finish, start


def _anthropic(api) -> dict:
    """Config keys for the fake Anthropic server (the zygote then preloads its SDK)."""
    return {"provider": "anthropic", "base_url": api.url, "model": "claude-fake"}


def warm(daemon):
    """``daemon`` once its zygote holds spares (children start with the SDK imported: no
    second-long import inside a test's first model call); returns it.  A daemon that starts
    children cold (``supervisor.start_method: spawn``) has no spares: returned as it is."""
    if daemon.call("status")["start"]["method"] != "spawn":
        wait_for(lambda: daemon.call("status")["start"].get("spares"), timeout=60, what="warm spares")
    return daemon


def _dataset(tmp_path, count: int):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt number {i}"}) + "\n" for i in range(count)))
    return path


def test_a_batch_at_the_limit_completes_every_prompt_with_few_refusals(make_daemon, tmp_path):
    with FakeAnthropic(limits=Limits(requests=3, window=1.5)) as api:
        api.default = Message([thinking_block("This one is easy to answer."), text_block("done")])  # kept: reasoning
        daemon = warm(make_daemon({"supervisor": {"max_children": 6}, **_anthropic(api)}))
        record = start(daemon, _dataset(tmp_path, 12), "limited", batch_size=4, num_workers=6, distribution="no_web")
        final = finish(daemon, record, timeout=120)
        assert final["status"] == "completed", final
        assert final["progress"]["failed"] == 0 and final["progress"]["done"] == 12, final["progress"]
        assert api.limits.admitted == 12
        # a limit of 3 per 1.5 s is below the initial window (4): its first burst may be refused, once
        assert api.limits.refused_total <= 3, api.limits.refused
        governor = daemon.call("status")["governor"]
        assert [g["endpoint"] for g in governor] == [f"anthropic {api.url}"]  # no key: no key hash shown


def _calls_twice(arrivals: list[float], first_reply_seconds: float = 0.0):
    """A fake model that calls a tool first (its reply streamed over about
    ``first_reply_seconds``), then answers; records when each request arrived."""
    lock = threading.Lock()

    def reply(request):
        with lock:
            arrivals.append(time.monotonic())
        last = request.body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return Message([text_block("all done")])
        return Message([tool_use_block("terminal", {"command": "true"})], stop_reason="tool_use",
                       event_delay=first_reply_seconds / 6)  # a tool_use reply streams about six events

    return reply


def test_parallel_delegations_share_one_limiter_and_retry_after_holds_for_all(make_daemon):
    arrivals: list[float] = []
    with FakeAnthropic() as api:
        # the first replies take a second, so no second call is asked for before the 429 is
        # reported (on a loaded machine its report has been seen to take 0.4 s to arrive)
        api.default = _calls_twice(arrivals, first_reply_seconds=1.0)
        daemon = warm(make_daemon({"delegation": {"max_concurrent_children": 3, "max_async_children": 3},
                                    **_anthropic(api)}))
        refuse = Error(429, "slow down", headers={"retry-after": "2"})
        api.reply(lambda request: (arrivals.append(time.monotonic()), refuse)[1])  # the fleet's first call: 429
        jobs = [daemon.delegate(f"task {i}", background=True, toolsets=["terminal"])["id"] for i in range(3)]
        ended = [daemon.wait_job(job, timeout=60) for job in jobs]
    assert [e["status"] for e in ended] == ["completed"] * 3, ended
    refused_at = arrivals[0]
    later = [t - refused_at for t in arrivals[1:]]
    # calls already granted when the 429 came go through; every call after them waits
    # for the retry-after of 2 s, whichever child makes it
    early = [t for t in later if t < 1.5]
    assert len(early) <= 2 and all(t >= 1.9 for t in later if t not in early), later
    assert len(arrivals) == 7  # 3 × 2 calls and the refused one: nobody retried on their own


class Logged:
    """A reply that notes in ``log`` that it was written (``what``) once it was."""

    def __init__(self, reply, log: list, what: str):
        self.reply, self.log, self.what = reply, log, what

    def write(self, out, request) -> None:
        self.reply.write(out, request)
        self.log.append(self.what)


def test_after_an_outage_one_pause_per_burst_then_one_probe_then_the_rest(make_daemon):
    """Four calls refused together (529, no retry-after) are one pause of the first step (1 s), not
    four steps; the probe after it is refused too (2 s); the next probe is answered, and only
    then do the other three calls go."""
    log: list[str] = []
    lock, together = threading.Lock(), threading.Event()

    def asked(refuse: bool, barrier: bool = False):
        def reply(request):
            with lock:
                log.append("asked")
                if log.count("asked") >= 4:
                    together.set()
            if barrier:  # the four first calls are all in flight before any is answered
                together.wait(30)
            if refuse:
                return Logged(Error(529, "Overloaded", type="overloaded_error"), log, "refused")
            return Logged(Message([text_block("back")]), log, "answered")
        return reply

    with FakeAnthropic() as api:
        api.default = asked(refuse=False)
        api.reply(*[asked(refuse=True, barrier=True) for _ in range(4)], asked(refuse=True))
        daemon = warm(make_daemon({"delegation": {"max_async_children": 4}, **_anthropic(api)}))
        jobs = [daemon.delegate(f"task {i}", background=True)["id"] for i in range(4)]
        ended = [daemon.wait_job(job, timeout=60) for job in jobs]
        paused = [e["data"] for e in daemon.call("events_since", since=0, types=["governor.paused"])["events"]]
        calls = daemon.call("status")["governor"][0]["calls"]
    assert [e["status"] for e in ended] == ["completed"] * 4, ended
    assert sorted(log[:8]) == ["asked"] * 4 + ["refused"] * 4, log
    assert log[8:12] == ["asked", "refused", "asked", "answered"], log  # one probe at a time
    assert sorted(log[12:]) == ["answered"] * 3 + ["asked"] * 3, log  # then the rest
    assert [p["seconds"] for p in paused] == [1.0, 2.0], paused  # one pause per burst, doubled per probe
    assert all("overloaded" in p["reason"] for p in paused) and calls == {"overloaded": 5, "ok": 4}, calls


def test_quota_exhausted_is_not_retried(make_daemon):
    with FakeOpenAI(limits=Limits(quota_exhausted=True)) as api:
        daemon = make_daemon({"provider": "openai-compat", "base_url": api.url + "/v1", "model": "gpt-fake"})
        job = daemon.delegate("anything")["id"]
        ended = daemon.wait_job(job, timeout=30)
        assert ended["status"] == "failed" and "quota" in (ended["error"] or ""), ended
        assert len(api.requests) == 1


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_a_waiting_child_is_not_stale_and_shows_in_ps_and_status(make_daemon):
    with FakeAnthropic(limits=Limits().overload(1, retry_after=10)) as api:
        daemon = warm(make_daemon({"delegation": {"stale_after_seconds": 6}, **_anthropic(api)}))
        job = daemon.delegate("wait for it", background=True)["id"]
        waiting = wait_for(lambda: next((r.get("waiting") for r in daemon.call("ps")["jobs"] if r["id"] == job),
                                        None), timeout=20, what="the job waiting in ps")
        assert "overloaded" in waiting["reason"] and waiting["endpoint"] == f"anthropic {api.url}"
        limiter = daemon.call("status")["governor"][0]
        assert limiter["waiting"] == [job] and limiter["paused_seconds"] > 0 and "overloaded" in limiter["reason"]
        ps = daemon.ctl("ps", env={"COLUMNS": "300"})
        assert "waiting" in ps.stdout and "overloaded" in ps.stdout, ps.stdout
        ended = daemon.wait_job(job, timeout=30)
        assert ended["status"] == "completed", ended  # 10 s of waiting, stale after 6 s: not stale
        assert len(api.requests) == 2


def test_an_overload_mid_stream_is_asked_for_again_not_failed(make_daemon):
    with FakeAnthropic() as api:
        api.reply_stream_error("overloaded_error", content=[text_block("half an answ")])
        daemon = warm(make_daemon(_anthropic(api)))
        ended = daemon.wait_job(daemon.delegate("go on")["id"], timeout=60)
        assert ended["status"] == "completed" and len(api.requests) == 2, ended
        calls = daemon.call("status")["governor"][0]["calls"]
        assert calls == {"overloaded": 1, "ok": 1}, calls


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_a_headers_only_wait_counts_down_in_ps_and_status_says_why(make_daemon):
    """No 429: the first reply's headers say no requests remain until the reset; the next job waits,
    ``ps`` shows the time left (less each time it is asked) and ``status`` the wait and its reason."""
    with FakeAnthropic(limits=Limits(requests=1, window=12)) as api:
        daemon = warm(make_daemon(_anthropic(api)))
        assert daemon.wait_job(daemon.delegate("first", background=True)["id"])["status"] == "completed"
        job = daemon.delegate("second", background=True)["id"]
        wait_for(lambda: any(r.get("waiting") for r in daemon.call("ps")["jobs"]), timeout=20, what="a wait in ps")

        def shown() -> float:
            ps = daemon.ctl("ps", env={"COLUMNS": "300"}).stdout
            return float(re.search(r"\[waiting ([0-9.]+)s for [^\]]*no requests remain", ps).group(1))

        first = shown()
        wait_for(lambda: shown() <= first - 0.5, timeout=5, what="the wait shown counting down")
        limiter = daemon.call("status")["governor"][0]
        assert limiter["waiting"] == [job] and limiter["paused_seconds"] > 0, limiter
        assert "no requests remain" in limiter["reason"] and limiter["paused_until"] > time.time()
        status = daemon.ctl("status", env={"COLUMNS": "300"}).stdout
        assert f"no requests remain until its bucket refills; waiting: {job}" in status, status
        shown_result = daemon.ctl("result", job, env={"COLUMNS": "300"}).stdout
        assert re.search(r"\[waiting [0-9.]+s for anthropic .*no requests remain", shown_result), shown_result
        paused = [e["data"] for e in daemon.call("events_since", since=0, types=["governor.paused"])["events"]]
        assert len(paused) == 1 and "no requests remain" in paused[0]["reason"], paused  # once, not per call
        assert paused[0]["endpoint"] == f"anthropic {api.url}" and 0 < paused[0]["seconds"] <= 13  # a reset in whole seconds
        assert daemon.wait_job(job, timeout=30)["status"] == "completed"
        assert api.limits.refused_total == 0


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_jobs_waiting_for_the_rate_limit_are_served_in_the_order_they_asked(make_daemon):
    """1 request per 4 s, told by the headers: four jobs started one by one (each once the one
    before waits; paced to the bucket, a job that started more slowly than a request's worth
    refills would not wait at all) make their calls in that order, whoever of them asks again first."""
    with FakeAnthropic(limits=Limits(requests=1, window=4)) as api:
        daemon = warm(make_daemon(_anthropic(api), env={"ANTHROPIC_API_KEY": "sk-ant-fifo-secret"}))
        jobs = []
        for i in range(4):
            jobs.append(daemon.delegate(f"task number {i}", background=True)["id"])
            if i == 0:
                wait_for(lambda: api.requests, timeout=20, what="the first call")
            else:
                wait_for(lambda: jobs[-1] in daemon.call("status")["governor"][0]["waiting"], timeout=20,
                         what=f"job {i} waiting")
        ended = [daemon.wait_job(job, timeout=60) for job in jobs]
    assert [e["status"] for e in ended] == ["completed"] * 4, ended
    asked = [re.search(r"task number (\d)", json.dumps(r.body["messages"][0])).group(1) for r in api.requests]
    # in the order they asked; on a loaded machine one call may still meet a 429 (and be asked again)
    assert list(dict.fromkeys(asked)) == ["0", "1", "2", "3"] and api.limits.refused_total <= 1, asked
    log = daemon.ctl("logs", jobs[3]).stdout  # one line when the wait begins, one when it is over; no key
    began = [line for line in log.splitlines() if "waiting for the provider's rate limit: anthropic" in line]
    assert len(began) == 1 and re.search(r"key [0-9a-f]{8}: .*\(told [0-9.]+s\)$", began[0]), log
    assert len(re.findall(r"rate limit: over after [0-9.]+s", log)) == 1 and "fifo-secret" not in log, log
