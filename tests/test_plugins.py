"""The house: the contract, job types as plugins, the one router — without processes."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermesd import jobs
from hermesd.contract import states, tokens, wire
from hermesd.delegation.notifications import Notifications
from hermesd.events import EventLog
from hermesd.handlers import jobs as job_ops
from hermesd.jobs import InvalidTransition, JobKind, JobTable
from hermesd.plugin import Plugin, Plugins
from hermesd.protocol import ProtocolError, Request
from hermesd.router import Router
from hermesd.server import PLUGINS, ROUTER
from hermesd.store import Store, StoreError


def test_every_stop_reason_says_how_a_job_ends():
    for name, reason in states.STOP_REASONS.items():
        assert reason.name == name and reason.error
        assert (reason.status is None) == (reason.exit_reason is None)
        assert reason.status is None or reason.status in states.TERMINAL
    assert states.exit_reason_of("cancelled") == "interrupted"
    assert states.exit_reason_of("timed_out") == "timeout"
    assert states.exit_reason_of("failed") == "error"


def test_the_child_takes_the_contract_spec_defaults():
    spec = wire.JobSpec.from_wire({"goal": "g", "depth": None, "unknown": 1})
    assert spec.goal == "g" and spec.depth == 0 and "unknown" not in spec.to_wire()


def test_a_job_result_round_trips_over_the_wire():
    """Every field survives to_wire/from_wire (through msgpack, as on children.sock); missing or
    None values take the defaults, unknown keys (a newer child's) are ignored; every field says what it means."""
    from hermesd.protocol import packb, unpackb

    full = wire.JobResult(status="completed", exit_reason="completed", summary="s", error=None, api_calls=2,
                              tokens={"input": 3, "output": 4}, trace=[{"name": "terminal", "ok": True, "bytes": 1}],
                              duration_seconds=1.5, synthetic=True, provider="scripted", model="m",
                              messages=[{"role": "user", "content": []}], trajectory={"conversations": []},
                              traceback="tb")
    assert wire.JobResult.from_wire(unpackb(packb(full.to_wire()))) == full
    assert set(full.to_wire()) == wire.JobResult.names()
    partial = wire.JobResult.from_wire({"status": "failed", "tokens": None, "job": "deleg_1", "new_key": 1})
    assert partial == wire.JobResult(status="failed") and partial.tokens == dict.fromkeys(tokens.TOKEN_KEYS, 0)
    assert all(f.metadata.get("doc") for f in dataclasses.fields(wire.JobResult))


def test_the_plugins_declare_every_kind_once():
    plugins = Plugins(PLUGINS)
    assert list(plugins.kinds) == [kind.name for cls in PLUGINS for kind in cls.kinds]  # each once, in plugin order
    assert {"delegation", "background", "session_turn", "session_compact", "batch", "batch_item", "batch_driver",
            "ray_item", "kanban_worker"} <= set(plugins.kinds)
    batch = ("batch", "batch_item", "batch_driver", "ray_item")
    assert [k for k in batch if not plugins.kind(k).process] == ["batch", "ray_item"]
    assert [k for k in batch if plugins.kind(k).at_restart == "resume"] == ["batch"]
    assert {k for k in plugins.kinds if plugins.kind(k).at_shutdown == "stop"} >= {"delegation", "kanban_worker"}

    class Twice(Plugin):
        kinds = (JobKind("delegation", "other"),)

    with pytest.raises(ValueError, match="declared twice"):
        Plugins((*PLUGINS, Twice))


def test_hooks_reach_only_the_plugin_of_the_kind():
    seen = []

    class A(Plugin):
        kinds = (JobKind("a", "a"),)

        def on_terminal(self, row):
            seen.append(("A", row["id"]))
            return []

        def after_exit(self, row):
            seen.append(("after", row["id"]))

    class B(Plugin):
        kinds = (JobKind("b", "b"),)

    plugins = Plugins((A, B))
    plugins.start(SimpleNamespace())
    plugins.on_terminal({"id": "b_1", "kind": "b"})
    plugins.on_terminal({"id": "a_1", "kind": "a"})
    plugins.on_exit({"id": "b_2", "kind": "b"})
    plugins.after_exit({"id": "b_2", "kind": "b"})
    assert plugins.on_terminal({"id": "x_1", "kind": "x"}) == [] and plugins.on_exit(None) is None
    assert seen == [("A", "a_1"), ("after", "b_2")]


def test_the_hooks_are_declared_once_and_plugins_derives_its_calls():
    """Plugins has one call per hook of Plugin, with its scope; the runner calls through it."""
    from hermesd.plugin import HOOKS

    assert HOOKS == {"spec_defaults": "own", "stale_after": "own", "resume_on_restart": "own", "spec": "own", "on_result": "own", "on_terminal": "own", "on_exit": "own", "stop": "own",
                     "admit": "every", "child_env": "every", "any_spec": "every", "any_result": "every", "after_exit": "every", "on_event": "every", "configure": "every",
                     "status": "every", "restore": "every", "settling": "every", "shutdown": "every"}
    assert all(getattr(Plugins, name).__name__ == name for name in HOOKS)


def test_admit_reaches_every_plugin_and_may_refuse_the_job():
    class Stamp(Plugin):  # no kind of its own, as hermesd.containers.ops.ContainersPlugin
        def admit(self, job_id, kind, fields):
            if fields.get("goal") == "refuse":
                raise ProtocolError("bad_request", f"job {job_id}: refused")
            fields["spec"] = {**fields.get("spec", {}), "stamped": kind}

    plugins = Plugins((Stamp,))
    plugins.start(SimpleNamespace())
    assert plugins.kinds == {}
    fields = {"goal": "g"}
    plugins.admit("a_1", "a", fields)
    assert fields == {"goal": "g", "spec": {"stamped": "a"}}
    with pytest.raises(ProtocolError, match="a_2: refused"):
        plugins.admit("a_2", "b", {"goal": "refuse"})


def test_a_kind_without_a_process_skips_starting(tmp_path):
    store = Store(tmp_path / "state.db")
    try:
        table = JobTable(store, EventLog(store, lambda frames: None), Plugins(PLUGINS).kinds)
        batch = table.create("batch", id="batch_x")
        with pytest.raises(InvalidTransition):
            table.transition(batch["id"], "starting")
        assert table.transition(batch["id"], "running")["status"] == "running"
        item = table.create("batch_item")
        assert item["id"].startswith("item_")
        with pytest.raises(InvalidTransition):
            table.transition(item["id"], "running")
        with pytest.raises(ProtocolError, match="is running"):
            table.create("batch", id="batch_x", replace_ended=True)
        table.transition(batch["id"], "cancelled")
        again = table.create("batch", id="batch_x", replace_ended=True)
        assert again["status"] == "queued" and len(table.list(kinds=("batch",))) == 1
    finally:
        store.close()


def test_the_router_serves_every_family_and_unwraps_child_call():
    assert {"delegate", "batch.run", "kanban.create", "session.send", "cancel"} <= set(ROUTER.ops)
    assert {"child.hello", "child.delegate", "kanban.complete", "kanban.create"} <= set(ROUTER.child_ops)
    assert "delegate" in ROUTER.work_ops and "ps" not in ROUTER.work_ops
    with pytest.raises(ValueError, match="defined twice"):
        Router((job_ops, job_ops))

    calls = []

    async def fake(ctx, job, args):
        calls.append((job, args))
        return "ok"

    router = Router(())
    router.child_ops["kanban.show"] = fake
    ctx = SimpleNamespace(stopping=False, runner=SimpleNamespace(authenticate=lambda args: args["job"]))
    answer = asyncio.run(router.child(ctx, Request(1, "child.call", {"job": "j", "token": "t", "op": "kanban.show",
                                                                    "args": {"id": "kb_1"}})))
    assert answer == "ok" and calls == [("j", {"id": "kb_1", "job": "j", "token": "t"})]
    for bad in ({"op": "child.call"}, {"op": 3}, {"op": "kanban.show", "args": []}):
        with pytest.raises(ProtocolError) as err:
            asyncio.run(router.child(ctx, Request(2, "child.call", {"job": "j", "token": "t", **bad})))
        assert err.value.code == "bad_request"
    with pytest.raises(ProtocolError) as err:
        asyncio.run(router.child(ctx, Request(3, "child.call", {"job": "j", "op": "kanban.nope"})))
    assert err.value.code == "unknown_op"


def test_every_kanban_status_is_reachable():
    from hermesd.kanban.board import TRANSITIONS

    reached = {"triage", "todo"} | {new for news in TRANSITIONS.values() for new in news}
    assert reached == set(states.KanbanStatus) == set(TRANSITIONS)
    assert set(jobs.TRANSITIONS) | {s for news in jobs.TRANSITIONS.values() for s in news} == set(states.JobStatus)


def test_the_schema_is_what_the_core_and_the_plugins_declare(tmp_path):
    store = Store(tmp_path / "state.db", Plugins(PLUGINS).migrations())
    try:
        tables = {r["name"] for r in store.all("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"jobs", "events", "settings", "notifications", "sessions", "messages", "kanban_tasks",
                "kanban_links", "kanban_comments", "approvals", "spend", "compactions", "steer_inbox"} <= tables
        assert store.version == 9
    finally:
        store.close()


def test_a_version_8_state_db_gains_the_kanban_keys_and_the_steer_inbox_keeping_its_tasks(tmp_path):
    migrations = Plugins(PLUGINS).migrations()
    old = Store(tmp_path / "state.db", migrations[:8])
    old.insert("kanban_tasks", {"title": "kept", "assignee": "p", "status": "todo", "created_at": "t", "updated_at": "t"})
    old.close()
    store = Store(tmp_path / "state.db", migrations)
    try:
        assert store.version == 9
        assert store.one("SELECT id, title, idempotency_key FROM kanban_tasks") == {
            "id": "kb_1", "title": "kept", "idempotency_key": None}
        assert store.all("SELECT * FROM steer_inbox") == []
    finally:
        store.close()


def test_a_migration_applies_whole_or_not_at_all(tmp_path):
    """Each version's statements run in one transaction (one script, so none of them stays
    prepared in the connection's cache): one that fails leaves the database at the version
    before it, without the tables of that version's other statements."""
    path = tmp_path / "state.db"
    Store(path, ["CREATE TABLE a (x)"]).close()
    with pytest.raises(StoreError, match="table a already exists"):
        Store(path, ["CREATE TABLE a (x)", "", "CREATE TABLE b (y);\nCREATE TABLE a (z)"])
    store = Store(path, ["CREATE TABLE a (x)", "", "CREATE TABLE b (y);\nCREATE INDEX b_y ON b (y)"])
    try:
        names = {r["name"] for r in store.all("SELECT name FROM sqlite_master")}
        assert names == {"a", "b", "b_y"} and store.db.execute("PRAGMA user_version").fetchone()[0] == 3
        assert not store.db.in_transaction
    finally:
        store.close()


def test_notification_states_change_only_along_their_transitions(tmp_path):
    store = Store(tmp_path / "state.db", Plugins(PLUGINS).migrations())
    try:
        notes = Notifications(store)
        notes.store_new("bg_1", "main", "block")
        assert [n["job"] for n in notes.pending("main")] == ["bg_1"] and notes.pending_count() == 1
        notes.queue("bg_1", "turn_1", 1)
        notes.requeue("bg_1")  # its turn was gone at start-up
        notes.queue("bg_1", "turn_2", 2)
        notes.acknowledge("bg_1")
        assert notes.get("bg_1")["state"] == "delivered" and notes.get("bg_1")["delivered_at"]
        with pytest.raises(ProtocolError, match="is delivered and cannot become queued"):
            notes.queue("bg_1", "turn_3", 3)
        notes.store_new("bg_2", None, "block")  # no session: its event delivers it
        assert notes.get("bg_2")["state"] == "delivered" and notes.pending_count() == 0
        with pytest.raises(ProtocolError, match="not stored"):
            notes.acknowledge("bg_3")
    finally:
        store.close()


def test_each_config_section_is_declared_by_one_plugin_package():
    """``config.yaml``'s sections are the core's and those the plugins' packages declare (their
    ``config`` module), each key once, and every such package is a plugin's — or a package without
    ops (no ``ops.py``: the part of a process apart from the daemon, such as the dashboard's)."""
    import importlib

    from hermesd import config

    def has_ops(package: str) -> bool:
        return (Path(importlib.import_module(package).__file__).parent / "ops.py").exists()

    packages = {cls.__module__.rpartition(".")[0] for cls in PLUGINS}
    packages |= {p.__module__.rpartition(".")[0] for p in config.parts()
                 if not has_ops(p.__module__.rpartition(".")[0])}
    declared = [f.name for part in (config.Core, *config.parts()) for f in dataclasses.fields(part)]
    assert sorted(declared) == sorted(f.name for f in dataclasses.fields(config.Config))
    assert len(declared) == len(set(declared))
    assert {part.__module__.rpartition(".")[0] for part in config.parts()} <= packages
    assert {"delegation", "sessions", "kanban", "batch"} <= {f.name for part in config.parts()
                                                            for f in dataclasses.fields(part)}


def test_every_kind_with_a_process_takes_its_defaults_from_its_plugin():
    """A child's defaults are its kind's declaration (``spec_defaults``); every job type whose children
    are subagents (its plugin a ``hermesd.subagents.SubagentRules``: delegation, sessions, batch,
    Kanban) takes the ``delegation:`` section's, as before the declaration moved to them."""
    from hermesd import config
    from hermesd.delegation.config import child_defaults
    from hermesd.subagents import SubagentRules

    cfg = config.parse("delegation: {max_turns: 7, model: m, child_timeout_seconds: 5, stale_after_seconds: 4}\n")
    plugins = Plugins(PLUGINS)
    owners = {kind.name: cls for cls in PLUGINS for kind in cls.kinds if issubclass(cls, SubagentRules)}
    assert {"delegation", "session_turn", "batch_item", "kanban_worker"} <= set(owners)
    for name in (n for n in plugins.names(process=True) if n in owners):
        got = owners[name].spec_defaults(SimpleNamespace(ctx=SimpleNamespace(config=cfg)), {"kind": name})
        assert got == child_defaults(cfg.delegation), name
    def ask(hook, name, cfg):
        return getattr(owners[name], hook)(SimpleNamespace(ctx=SimpleNamespace(config=cfg)), {"kind": name})

    off = config.parse("delegation: {resume_on_restart: false}\n")
    for name in owners:  # their stale limit and resume rule likewise (ray_item too: stopped through its driver)
        assert ask("stale_after", name, cfg) == 4 and ask("resume_on_restart", name, cfg), name
        assert ask("resume_on_restart", name, off) is False, name
    # the zygote's preload, read before any plugin starts: the providers the job types declare
    assert set(plugins.warm_providers(config.parse("delegation: {provider: openai-compat}\n"))) == {"openai-compat"}
    assert set(plugins.warm_providers(cfg)) == {None}
    assert plugins.stale_after({"kind": "unknown"}) is None
    assert got["max_turns"] == 7 and got["activity_interval_seconds"] == 1.0 and got["timeout_seconds"] == 5


def test_provider_traits_are_the_table_s_and_the_bill_reads_them():
    """A provider's traits are declared in its row (no second list of them): an unknown trait is
    refused where the row is written, the bill's free providers and the governor's metered ones
    are the rows that say so."""
    from hermesd.contract.providers import PROVIDER_TABLE, ProviderEntry
    from hermesd.prices import DEFAULT_PRICES, FREE, price_of

    with pytest.raises(ValueError, match="unknown traits"):
        ProviderEntry("x", "child.providers.x", "X", traits=frozenset({"cheap"}))
    for entry in PROVIDER_TABLE:
        assert (price_of("claude-sonnet-4-6", DEFAULT_PRICES, entry.name) == FREE) == entry.free, entry.name
        for alias in entry.aliases:
            assert (price_of("claude-sonnet-4-6", DEFAULT_PRICES, alias) == FREE) == entry.free, alias
    from child.governor import Grants

    for entry in PROVIDER_TABLE:  # asked of the table, not of an attribute of the provider
        provider = type("P", (), {"name": entry.name, "model": "m"})()
        assert Grants(None, provider, None, None, print).metered == entry.metered, entry.name


def test_the_child_runs_the_entry_point_its_kind_names():
    """child/__main__ asks the spec (its kind's ``JobKind.entry``), not an if-chain of kinds; every
    declared kind's entry point exists, and a malformed one is a clear error."""
    from child.__main__ import entry_point
    from hermesd.server import PLUGINS

    for kind in Plugins(PLUGINS).kinds.values():
        assert callable(entry_point(kind.entry)), kind.name
    with pytest.raises(ValueError, match="module:function"):
        entry_point("child.agent.run")
