"""The bill without a daemon: prices, the ledger over a real state database (records, rollups,
budgets with calls in flight, a reopened database)."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from hermesd import config
from hermesd.billing.budget import budget_of, nothing_spent
from hermesd.billing.ledger import Ledger, report
from hermesd.events import EventLog
from hermesd.jobs import JobTable
from hermesd.prices import DEFAULT_PRICES, Price, model_key, price_of
from hermesd.protocol import ProtocolError
from hermesd.store import Store

SONNET = "claude-sonnet-4-6"  # $3 in, $15 out, $3.75 cache write, $0.30 cache read per million


def test_cost_from_the_table_and_unknown_models():
    price = price_of(SONNET, DEFAULT_PRICES)
    tokens = {"input": 1_000_000, "output": 1_000_000, "cache_write": 200_000, "cache_read": 500_000}
    # uncached 300k at $3, 200k written at $3.75, 500k read at $0.30, 1M out at $15
    assert price.cost(tokens) == pytest.approx(0.9 + 0.75 + 0.15 + 15)
    assert price_of("anthropic/Claude-Sonnet-4.6", DEFAULT_PRICES) == price
    assert model_key("claude-haiku-4-5-20251001") == "claude-haiku-4-5"
    assert price_of("my-own-model", DEFAULT_PRICES) is None and price_of(None, DEFAULT_PRICES) is None
    assert price_of("SmolLM2", DEFAULT_PRICES, "local").cost(tokens) == 0  # no bill for this machine's own model
    assert price_of(SONNET, DEFAULT_PRICES, "scripted").cost(tokens) == 0  # named after a paid model, calls none


def test_config_prices_override_and_name_their_problems(tmp_path):
    cfg = config.parse("prices:\n  my-model: {input: 1, output: 2}\n  claude-sonnet-4-6: {input: 0, output: 0}\n")
    assert cfg.price_table()["my-model"] == Price(1.0, 2.0, 1.0, 1.0)  # cache prices default to input's
    assert cfg.price_table()[SONNET].cost({"input": 10, "output": 10}) == 0
    path = tmp_path / "config.yaml"
    path.write_text("prices:\n  a: {input: -1, output: 2}\n  b: {input: 1}\n  c: 3\n  d: {input: 1, output: 1, x: 1}\n"
                    "budgets:\n  daily_cost_usd: 0\n")
    with pytest.raises(config.ConfigError) as err:
        config.load(path)
    assert [str(p) for p in err.value.problems] == [
        f"{path}:2: prices.a.input: must be a number >= 0 (USD per million tokens), not -1",
        f"{path}:3: prices.b: needs output (USD per million tokens)",
        f"{path}:4: prices.c: must be a mapping such as {{input: 3, output: 15, cache_write: 3.75, cache_read: 0.3}} "
        "(USD per million tokens)",
        f"{path}:5: prices.d.x: unknown key (known keys: input, output, cache_write, cache_read)",
        f"{path}:7: budgets.daily_cost_usd: must be a number > 0, not 0.0"]


@pytest.mark.parametrize("args, field", [({"max_cost_usd": 0}, "max_cost_usd"), ({"max_cost_usd": -1}, "max_cost_usd"),
                                         ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens"),
                                         ({"max_cost_usd": "1"}, "max_cost_usd"),
                                         ({"max_cost_usd": float("nan")}, "max_cost_usd")])
def test_bad_limits_are_refused_naming_the_field(args, field):
    with pytest.raises(ProtocolError) as err:
        budget_of(args)
    assert err.value.code == "bad_request" and err.value.details == {"field": field}
    assert budget_of({"max_cost_usd": 0.5, "max_tokens": 10}) == {"max_cost_usd": 0.5, "max_tokens": 10}


class Bench:
    """A ledger over a real state database in ``path``, with a config made of ``text``."""

    def __init__(self, path, text=""):
        self.store = Store(path / "state.db")
        self.jobs = JobTable(self.store, EventLog(self.store))
        self.cfg = config.parse(text or "{}\n")
        self.ledger = Ledger(self.store, self.jobs, lambda: self.cfg)

    def job(self, kind="delegation", **fields):
        return self.jobs.create(kind, id=self.jobs.new_id(kind), dispatched_at="2026-12-01T00:00:00Z",
                                **fields)["id"]


def test_running_totals_recorded_once_and_rolled_up(tmp_path):
    b = Bench(tmp_path)
    root = b.job(model=SONNET, session="s1", spec={"budget": {"max_tokens": 10**9}})
    child = b.job(parent=root, session="s1", model=SONNET)
    other = b.job(kind="background", model="unpriced-model")
    b.ledger.observe(root, {"input": 1000, "output": 100, "cache_read": 800}, model=SONNET, api_calls=1)
    b.ledger.observe(root, {"input": 1000, "output": 100, "cache_read": 800}, model=SONNET, api_calls=1)  # again
    b.ledger.observe(root, {"input": 3000, "output": 300, "cache_read": 2400, "cache_write": 100}, api_calls=2)
    b.ledger.settle(child, "g1", SONNET, {"input": 500, "output": 50})
    b.ledger.observe(child, {"input": 500, "output": 50}, api_calls=1)  # the settled call, not again
    b.ledger.observe(other, {"input": 10, "output": 5}, api_calls=1)
    b.ledger.forget(child)
    b.ledger.observe(child, {"input": 20, "output": 2}, api_calls=1)  # a new run of it counts from zero

    rec = b.jobs.get(root)
    assert (rec["cache_read"], rec["cache_write"], bool(rec["cost_unknown"])) == (2400, 100, False)
    price = price_of(SONNET, DEFAULT_PRICES)
    assert rec["cost_usd"] == pytest.approx(price.cost({"input": 3000, "output": 300, "cache_read": 2400,
                                                        "cache_write": 100}))
    tree = b.ledger.spent(("tree", root))
    assert (tree["input"], tree["output"], tree["calls"]) == (3520, 352, 4)
    assert b.ledger.spent(("tree", child))["input"] == 520  # a subtree inside a tree
    assert b.jobs.get(other)["cost_unknown"] == 1
    by_tree = {r["key"]: r for r in report(b.store, by="tree")["rows"]}
    assert by_tree[other]["cost_unknown"] and by_tree[other]["cost_usd"] == 0  # unknown, never a made-up 0
    assert not by_tree[root]["cost_unknown"]
    assert [r["key"] for r in report(b.store, by="session")["rows"]] == ["s1"]
    assert {r["key"] for r in report(b.store, by="model")["rows"]} == {SONNET, "unpriced-model"}
    total = report(b.store, by="day")
    assert total["total"]["input"] == 3530 and total["total"]["cost_unknown"]
    assert report(b.store, by="day", since="2999-01-01")["rows"] == []

    # a restart does not forget what was spent
    b.store.close()
    again = Bench(tmp_path)
    assert again.ledger.spent(("tree", root)) == tree
    assert report(again.store, by="day") == total


def test_parallel_children_overshoot_by_at_most_one_call_each(tmp_path):
    b = Bench(tmp_path)
    limit = 0.05
    root = b.job(model=SONNET, spec={"budget": {"max_cost_usd": limit}})
    children = [b.job(parent=root, model=SONNET) for _ in range(4)]
    call = {"input": 2000, "output": 500}  # $0.0135 a call at most
    worst = price_of(SONNET, DEFAULT_PRICES).cost(call)
    refused, made = set(), 0
    while len(refused) < len(children):
        granted = []
        for n, child in enumerate(children):  # every child asks at once ...
            if child in refused:
                continue
            refusal = b.ledger.reserve(child, SONNET, "anthropic", 500, 2000, grant_id=f"{child}-{made}")
            if refusal is None:
                granted.append(child)
            else:
                refused.add(child)
                assert refusal.budget == f"max_cost_usd of delegation tree of {root}"
                assert "spent $" in refusal.text() and "of its limit $0.0500" in refusal.text()
        for child in granted:  # ... then the calls end
            b.ledger.settle(child, f"{child}-{made}", SONNET, {"input": 2000, "output": 500})
            made += 1
    spent = b.ledger.spent(("tree", root))["cost_usd"]
    assert limit <= spent <= limit + len(children) * worst
    assert made == 4  # with every call in flight counted at its max, the 4 first ones fill the limit


def test_session_and_daily_budgets_and_a_model_without_price(tmp_path):
    b = Bench(tmp_path, "budgets: {session_daily_tokens: 1000, daily_cost_usd: 1.0}\n")
    turn = b.job(kind="session_turn", session="s1", model=SONNET)
    lone = b.job(model="unpriced-model")
    b.ledger.observe(turn, {"input": 900, "output": 200}, api_calls=1)
    refusal = b.ledger.exhausted(turn)
    assert refusal.budget.startswith("budgets.session_daily_tokens of session s1 on ")
    assert refusal.text().endswith("spent 1,100 tokens of its limit 1,000 tokens")
    assert b.ledger.exhausted(lone) is None
    cost_blind = b.ledger.reserve(lone, "unpriced-model", "anthropic", 100, 100)
    assert cost_blind.reason.startswith("the price of model unpriced-model is unknown")


def test_a_budget_filled_only_by_calls_in_flight_says_wait(tmp_path):
    b = Bench(tmp_path)
    root = b.job(model=SONNET, spec={"budget": {"max_tokens": 10_000}})
    first, second = (b.job(parent=root, model=SONNET) for _ in range(2))
    assert b.ledger.reserve(first, SONNET, "anthropic", 4000, 4000, grant_id="a") is None  # 8,000 in flight
    assert b.ledger.reserve(second, SONNET, "anthropic", 4000, 4000, grant_id="b") is None  # 16,000: one over
    waiting = b.ledger.reserve(first, SONNET, "anthropic", 4000, 4000, grant_id="c")
    assert waiting.wait and waiting.spent == 0 and waiting.in_flight == 16_000
    b.ledger.settle(first, "a", SONNET, {"input": 3000, "output": 100})
    b.ledger.settle(second, "b", SONNET, {"input": 3000, "output": 100})
    assert b.ledger.reserve(first, SONNET, "anthropic", 4000, 4000, grant_id="d") is None  # 6,200 spent: go
    b.ledger.settle(first, "d", SONNET, {"input": 4000, "output": 100})
    spent = b.ledger.reserve(second, SONNET, "anthropic", 4000, 4000, grant_id="e")
    assert not spent.wait and spent.spent == 10_300  # truly spent: refused for good


def test_a_kanban_tasks_workers_roll_up_under_the_task(tmp_path):
    b = Bench(tmp_path)
    worker = b.job(kind="kanban_worker", parent="kb_7", model=SONNET)  # a worker's parent is its task
    helper = b.job(parent=worker, model=SONNET)
    b.ledger.observe(worker, {"input": 100, "output": 10}, api_calls=1)
    b.ledger.observe(helper, {"input": 50, "output": 5}, api_calls=1)
    rows = report(b.store, by="task")["rows"]
    assert [(r["key"], r["kind"], r["input"], r["calls"]) for r in rows] == [("kb_7", "kanban_task", 150, 2)]


def test_usage_the_locked_database_cannot_take_is_held_counted_and_written_once_in_order(tmp_path, caplog):
    b = Bench(tmp_path, "budgets: {session_daily_tokens: 2000}\n")
    root = b.job(model=SONNET, session="s1", spec={"budget": {"max_tokens": 10**6}})
    child = b.job(parent=root, session="s1", model=SONNET)
    lock = sqlite3.connect(b.store.path, isolation_level=None)

    async def under_the_lock():
        lock.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        b.ledger.observe(child, {"input": 1000, "output": 100}, model=SONNET, api_calls=1)
        assert b.ledger.reserve(child, SONNET, "anthropic", 100, 100, grant_id="g") is None
        b.ledger.settle(child, "g", SONNET, {"input": 300, "output": 30})
        b.ledger.observe(child, {"input": 1300, "output": 130}, model=SONNET, api_calls=2)  # the settled call again
        held = list(b.ledger.pending.held.values())
        b.ledger.pending.put(held[0])  # the same record once more: held once
        assert [e.row["input"] for e in b.ledger.pending.held.values()] == [1000, 300]
        assert report(b.store)["total"]["calls"] == 0  # nothing written yet
        assert b.ledger.spent(("tree", root))["tokens"] == 1430  # but counted by the budgets meanwhile
        assert b.ledger.spent(("tree", child))["calls"] == 2
        assert b.ledger.exhausted(child) is None
        b.ledger.observe(child, {"input": 1900, "output": 190}, model=SONNET, api_calls=3)
        assert b.ledger.exhausted(child).text().endswith("spent 2,090 tokens of its limit 2,000 tokens")
        lock.execute("ROLLBACK")
        await wait_until(lambda: not b.ledger.pending.held)  # the retry timer writes them

    asyncio.run(under_the_lock())
    rows = b.store.all("SELECT input, calls FROM spend ORDER BY id")
    assert [(r["input"], r["calls"]) for r in rows] == [(1000, 1), (300, 1), (600, 1)]  # in order, once
    assert b.jobs.get(child)["cost_usd"] == pytest.approx(price_of(SONNET, DEFAULT_PRICES).cost(
        {"input": 1900, "output": 190}))
    lock.execute("BEGIN IMMEDIATE")
    asyncio.run(held_then_stopped(b, child))
    lock.execute("ROLLBACK")
    assert "usage lost from the bill: 1 record(s) of job(s) " + child in caplog.text
    assert "1 call(s), 100 input, 10 output" in caplog.text


async def held_then_stopped(b, job):
    b.ledger.observe(job, {"input": 2000, "output": 200}, model=SONNET, api_calls=4)
    assert b.ledger.pending.settling() > 0
    b.ledger.pending.close()  # the daemon stops with the database still locked: says what is lost
    assert not b.ledger.pending.held and b.ledger.pending.settling() == 0


async def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the held usage was not written"
        await asyncio.sleep(0.05)


def test_nothing_spent_is_what_the_ledger_says_of_an_empty_spend_table(tmp_path):
    """``status`` and ``job`` answer :func:`nothing_spent` without the ledger while no ``spend`` row exists."""
    b = Bench(tmp_path)
    assert b.ledger.spent(("day", "2026-01-01")) == nothing_spent()
    assert b.ledger.spent(("tree", b.job())) == nothing_spent()
