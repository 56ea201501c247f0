"""The bill through a real daemon: tokens and cost per job from the fake API's usage (cache tokens
included), rolled up, shown by ps/result/usage, kept across a restart; budgets that stop a job."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import pytest

from hermesd.unwritable import WAIT_SECONDS
from tests.fakes import scrub_env
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.cache import PromptCache
from tests.harness import wait_for

PRICES = {"claude-test": {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3}}
LOOP = [{"tool_calls": [{"name": "terminal", "input": {"command": "echo hi"}}]}] * 20


@pytest.fixture
def api(monkeypatch):
    scrub_env(monkeypatch)
    with FakeAnthropic(cache=PromptCache(min_tokens=64)) as server:
        yield server


def fake_daemon(make_daemon, api, **config):
    return make_daemon({"provider": "anthropic", "base_url": api.url, "model": "claude-test", "prices": PRICES,
                        **config}, env={"ANTHROPIC_API_KEY": "test-key"})


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_tokens_and_cost_per_job_rolled_up_shown_and_kept(make_daemon, api):
    api.reply_tool_use("terminal", {"command": "echo one"})
    d = fake_daemon(make_daemon, api)
    job = d.wait_job(d.delegate("run echo", toolsets=["terminal"])["id"])
    assert job["status"] == "completed" and job["api_calls"] == 2
    tokens = job["tokens"]
    usages = [r.usage for r in api.requests]
    assert tokens["cache_read"] == sum(u["cache_read_input_tokens"] for u in usages) > 0  # the 2nd call read the 1st
    assert tokens["cache_write"] == sum(u["cache_creation_input_tokens"] for u in usages) > 0
    assert tokens["input"] == sum(u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
                                  for u in usages)
    uncached = tokens["input"] - tokens["cache_write"] - tokens["cache_read"]
    expected = (uncached * 3 + tokens["output"] * 15 + tokens["cache_write"] * 3.75 + tokens["cache_read"] * 0.3) / 1e6
    assert job["cost_usd"] == pytest.approx(expected, abs=1e-6) and not job["cost_unknown"]
    result = d.call("result", id=job["id"])
    assert result["tree_usage"]["cost_usd"] == job["cost_usd"] and result["tree_usage"]["calls"] == 2

    unpriced = d.wait_job(d.delegate("say hi", toolsets=[], model="claude-unpriced")["id"])
    assert unpriced["cost_unknown"] and unpriced["cost_usd"] == 0 and unpriced["tokens"]["input"] > 0
    listing = d.ctl("ps", "--all")
    assert listing.returncode == 0 and "COST" in listing.stdout and "unknown" in listing.stdout
    assert f"${job['cost_usd']:.4f}" in listing.stdout
    shown = d.ctl("result", unpriced["id"])
    assert "cost: unknown" in shown.stdout

    by_model = json.loads(d.ctl("usage", "--by", "model", "--json").stdout)
    rows = {r["key"]: r for r in by_model["rows"]}
    assert rows["claude-test"]["cost_usd"] == job["cost_usd"] and rows["claude-test"]["calls"] == 2
    assert rows["claude-unpriced"]["cost_unknown"] and by_model["total"]["cost_unknown"]
    text = d.ctl("usage", "--by", "job").stdout.splitlines()
    assert text[0].split() == ["JOB", "CALLS", "INPUT", "CACHE", "WRITE", "CACHE", "READ", "OUTPUT", "COST"]
    assert any(line.startswith(job["id"]) and line.endswith(f"${job['cost_usd']:.4f}") for line in text)
    assert text[-1].startswith("total") and text[-1].endswith("+ unknown")
    assert d.ctl("usage", "--since", "2999-01-01").stdout.strip() == "nothing spent since 2999-01-01"
    bad = d.ctl("usage", "--since", "yesterday")
    assert bad.returncode != 0 and "'yesterday' is neither an ISO 8601 date or time" in bad.stderr

    status = d.ctl("status").stdout
    assert "spent today: 3 model calls" in status and "+ unknown" in status
    snapshot = d.ctl("top").stdout  # not a terminal: the board once, as text
    assert "spent today: $" in snapshot and f"{job['id']}  completed" in snapshot
    assert f"2 calls  ${job['cost_usd']:.4f}" in snapshot

    d.stop()
    d.start()  # a restart does not forget what was spent
    assert json.loads(d.ctl("usage", "--by", "model", "--json").stdout) == by_model
    assert d.call("job", id=job["id"])["cost_usd"] == job["cost_usd"]


def test_a_budget_stops_the_job_naming_it(make_daemon):
    d = make_daemon()  # the scripted provider: tokens that cost nothing
    job = d.wait_job(d.delegate("loop", toolsets=["terminal"], script=LOOP, max_tokens=300)["id"])
    assert (job["status"], job["exit_reason"]) == ("failed", "budget_exceeded")
    assert job["error"].startswith(f"budget exceeded: max_tokens of delegation tree of {job['id']}: spent ")
    assert job["error"].endswith("of its limit 300 tokens")
    assert 300 <= job["tokens"]["input"] + job["tokens"]["output"] and job["api_calls"] < 20
    events = d.call("events_since", since=0, types=["budget.exceeded"])["events"]
    assert [e["job"] for e in events] == [job["id"]] and events[0]["data"]["limit"] == 300
    assert job["cost_usd"] == 0 and not job["cost_unknown"]  # no model was called: no bill


def test_usage_since_takes_how_long_ago_as_clean_older_than_does(daemon):
    job = daemon.wait_job(daemon.delegate("count me", script=[{"text": "ok"}])["id"])
    for ago, back in (("2h", timedelta(hours=2)), ("1d12h", timedelta(hours=36))):
        before = datetime.now(timezone.utc)
        shown = daemon.ctl("usage", "--since", ago, "--by", "job", "--json")
        after = datetime.now(timezone.utc)
        assert shown.returncode == 0, shown.stderr
        answer = json.loads(shown.stdout)
        since = datetime.fromisoformat(answer["since"]).replace(tzinfo=timezone.utc)  # the daemon's UTC, to the second
        assert before - back - timedelta(seconds=1) <= since <= after - back, (ago, before, answer["since"])
        assert job["id"] in [r["key"] for r in answer["rows"]], answer
    bad = daemon.ctl("usage", "--since", "10x")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "hermesctl usage: Invalid value for '--since': '10x' is neither an ISO 8601 date or time (2026-12-01, "
        "2026-12-01T09:00:00Z) nor how long ago (10m, 2h, 7d, 1d12h) (see 'hermesctl usage --help')"), bad.stderr
    helped = " ".join(daemon.ctl("usage", "--help").stdout.split())
    assert "or from this long ago (10m, 2h, 7d, 1d12h, as clean --older-than reads it)" in helped, helped
    assert "is not a duration (e.g. 90, 45s" in daemon.ctl("clean", "--older-than", "soon").stderr  # the one parser


@pytest.mark.parametrize("value", [0, -1, "x"])
def test_bad_limits_are_bad_requests(daemon, value):
    with pytest.raises(Exception) as err:
        daemon.delegate("x", max_cost_usd=value)
    assert getattr(err.value, "code", None) == "bad_request" and "max_cost_usd" in str(err.value)
    shown = daemon.ctl("delegate", "x", "--max-tokens", "0")
    assert shown.returncode != 0 and "hermesctl: --max-tokens must be a number > 0" in shown.stderr


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_the_governors_grant_asks_the_ledger_first(make_daemon, api):
    for _ in range(12):
        api.reply_tool_use("terminal", {"command": "echo again"})
    d = fake_daemon(make_daemon, api)
    job = d.wait_job(d.delegate("loop", toolsets=["terminal"], max_cost_usd=0.004)["id"])
    assert (job["status"], job["exit_reason"]) == ("failed", "budget_exceeded")
    assert job["error"].startswith(f"budget exceeded: max_cost_usd of delegation tree of {job['id']}: spent $")
    assert job["error"].endswith("of its limit $0.0040")
    assert 0.004 <= job["cost_usd"] < 0.004 + 4096 * 15 / 1e6  # over by one call at most
    assert job["api_calls"] == len(api.requests) < 12  # the refused call never reached the API
    # what the grants reported and what the child's totals said are counted once
    assert d.call("result", id=job["id"])["tree_usage"]["calls"] == job["api_calls"]


def test_a_batch_over_its_budget_stops_dispatching_and_resumes_with_a_raised_one(daemon, tmp_path):
    from tests.test_batch_daemon import SCRIPTS, hermes_batch, write_dataset

    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": f"p{i}", "script": SCRIPTS["normal"]} for i in range(8)])
    base = ("--dataset_file", str(dataset), "--batch_size", "4", "--run_name", "cheap", "--num_workers", "1",
            "--allow_synthetic", "--output_dir", str(daemon.base / "out"))
    assert hermes_batch(daemon, *base, "--max_total_tokens", "0").returncode == 2  # not a number > 0
    stopped = hermes_batch(daemon, *base, "--max_total_tokens", "150")
    assert stopped.returncode == 13, stopped.stderr
    assert "budget exceeded: max_tokens of batch run batch_cheap: spent " in stopped.stderr
    assert "--resume --max_cost_usd" in stopped.stderr
    status = json.loads(daemon.ctl("batch", "status", "cheap", "--json").stdout)
    assert (status["status"], status["exit_reason"]) == ("failed", "budget_exceeded")
    done_first = status["progress"]["done"]
    assert 0 < done_first < 8 and status["usage"]["tokens"] >= 150
    assert status["usage"]["tokens"] < 150 + 2 * 200  # the one running prompt finished, nothing more started
    events = daemon.call("events_since", since=0, types=["batch.budget_stop"])["events"]
    assert len(events) == 1 and events[0]["data"]["pending"] == 8 - done_first
    resumed = hermes_batch(daemon, "--run_name", "cheap", "--output_dir", str(daemon.base / "out"), "--resume",
                           "--max_total_tokens", "100000")
    assert resumed.returncode == 0, resumed.stderr
    assert "spent: " in daemon.ctl("batch", "status", "cheap").stdout
    run_dir = daemon.base / "out" / "cheap"
    stats = json.loads((run_dir / "statistics.json").read_text())
    assert stats["prompts"]["written"] == 8 and stats["cost_usd"] == 0 and not stats["cost_unknown"]
    assert stats["usage"]["calls"] == stats["api_calls"] and stats["tokens"]["input"] > 0  # Hermes' keys stay
    line = json.loads((run_dir / "trajectories.jsonl").read_text().splitlines()[0])
    assert line["metadata"]["cost_usd"] == 0 and line["metadata"]["cost_unknown"] is False
    assert set(line["metadata"]["tokens"]) == {"input", "output", "cache_write", "cache_read"}


@pytest.mark.slow
def test_parallel_children_under_one_budget_overshoot_by_at_most_one_call_each(make_daemon, api):
    from tests.fakes.anthropic_server import Message, last_user_text, text_block, tool_use_block

    def brain(request):
        messages = request.body["messages"]
        first = messages[0]["content"][0].get("text", "")
        answered = messages[-1]["role"] == "user" and messages[-1]["content"][0].get("type") == "tool_result"
        if first.startswith("work"):  # a child: run commands until its budget says no
            return Message([tool_use_block("terminal", {"command": "echo busy"})], stop_reason="tool_use")
        if not answered:  # the parent: three children at once, then the answer
            return Message([tool_use_block("spawn_parallel", {"tasks": [{"goal": f"work {n}"} for n in range(3)]})],
                           stop_reason="tool_use")
        return Message([text_block(f"children said: {last_user_text(request)[:40]}")])

    api.default = brain
    d = fake_daemon(make_daemon, api, delegation={"max_turns": 30})
    limit = 0.02
    parent = d.wait_job(d.delegate("orchestrate", toolsets=["terminal", "delegation"], role="orchestrator",
                                   max_cost_usd=limit)["id"], timeout=120)
    children = [j for j in d.call("ps", all=True)["jobs"] if j.get("parent") == parent["id"]]
    assert len(children) == 3
    assert all((c["status"], c["exit_reason"]) == ("failed", "budget_exceeded") for c in children)
    assert all(f"max_cost_usd of delegation tree of {parent['id']}" in c["error"] for c in children)
    tree = d.call("result", id=parent["id"])["tree_usage"]
    one_call = 4096 * 15 / 1e6 + 0.01  # the most one call may cost here (its max_tokens, its input)
    assert limit <= tree["cost_usd"] <= limit + 3 * one_call
    assert tree["calls"] == len(api.requests) - sum(1 for r in api.requests if r.usage is None)


def test_a_running_jobs_progress_carries_the_cost_ps_shows(make_daemon, api):
    api.reply_tool_use("terminal", {"command": "echo one"})
    d = fake_daemon(make_daemon, api)
    job = d.wait_job(d.delegate("run echo", toolsets=["terminal"])["id"])
    progress = [e["data"] for e in d.call("events_since", since=0, limit=1000, types=["job.progress"])["events"]
                if e["job"] == job["id"] and "tokens" in e["data"]]
    costs = [p["cost_usd"] for p in progress if p["tokens"].get("input")]
    assert costs and 0 < costs[0] <= job["cost_usd"] and costs == sorted(costs), progress  # top shows these (the tui test)


def test_a_model_call_that_failed_leaves_the_bill_of_the_calls_before_it_alone(make_daemon):
    # Found by the soak (issue 44): a failed call (a stream broken off) counted as a call of the
    # child's run with no tokens; the child's next totals (which count replies only) then read as
    # fewer calls than recorded — "a new run of the job" — and every token so far was billed again.
    with FakeAnthropic() as api:
        api.reply_tool_use("terminal", {"command": "echo one"}).reply_tool_use("terminal", {"command": "echo two"})
        api.reply_truncated().reply_text("done")
        d = fake_daemon(make_daemon, api)
        job = d.wait_job(d.delegate("fail once", toolsets=["terminal"])["id"])
        paid = [r for r in api.requests if r.streaming]
    assert job["status"] == "completed" and job["api_calls"] == 3 and len(paid) == 4  # one of them broke off
    bill = d.call("usage", by="job")["total"]
    assert (bill["calls"], bill["input"], bill["output"]) == (3, 3 * 12, 3 * 7)  # the fake's usage of each reply


def test_model_calls_made_while_the_database_is_locked_are_billed_once_it_is_free(make_daemon, tmp_path):
    gate = tmp_path / "go"
    with FakeAnthropic() as api:
        api.reply_tool_use("terminal", {"command": f"while [ ! -e {gate} ]; do sleep 0.05; done"})
        for _ in range(3):
            api.reply_tool_use("terminal", {"command": "echo more"})
        api.reply_text("done")
        d = fake_daemon(make_daemon, api)
        job = d.delegate("work while the database is locked", toolsets=["terminal"], background=True)["id"]
        wait_for(lambda: len(api.requests) >= 1, 60, 0.02, "the first call")
        lock = sqlite3.connect(d.home / "state.db", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            gate.touch()
            wait_for(lambda: len(api.requests) >= 5, 60, 0.02, "every call made under the lock")
            time.sleep(WAIT_SECONDS + 1)  # past what a request waits for the database (a held state, not a race)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        final = d.wait_job(job)
    assert final["status"] == "completed"
    bill = d.call("usage", by="job")["total"]
    assert (bill["calls"], bill["input"], bill["output"]) == (5, 5 * 12, 5 * 7)
