"""The job state machine and the scheduler's caps, without processes."""

from __future__ import annotations

import pytest

from hermesd import jobs
from hermesd.events import EventLog
from hermesd.jobs import InvalidTransition, JobTable
from hermesd.protocol import ProtocolError
from hermesd.scheduler import Scheduler
from hermesd.store import Store, StoreError


@pytest.fixture
def table(tmp_path):
    store = Store(tmp_path / "state.db")
    sent = []
    events = EventLog(store, lambda frames: sent.append(frames))
    t = JobTable(store, events)
    t.sent = sent
    yield t
    store.close()


def test_terminal_states_are_final():
    for terminal in jobs.TERMINAL:
        for target in jobs.STATES:
            with pytest.raises(InvalidTransition):
                jobs.check_transition("j", terminal, target)


def test_allowed_paths():
    jobs.check_transition("j", "queued", "starting")
    jobs.check_transition("j", "starting", "running")
    jobs.check_transition("j", "running", "completed")
    with pytest.raises(InvalidTransition) as info:
        jobs.check_transition("j", "queued", "running")
    assert info.value.code == "invalid_state"


def test_transition_persists_then_publishes(table):
    row = table.create("delegation", goal="g", toolsets=["terminal"])
    table.transition(row["id"], "starting")
    table.transition(row["id"], "running")
    done = table.transition(row["id"], "completed", summary="ok", exit_reason="completed")
    assert done["status"] == "completed" and done["completed_at"] and done["duration_seconds"] >= 0
    seqs = [e["seq"] for e in table.events.since(0)]
    assert seqs == sorted(seqs) and len(seqs) == 4
    assert len(table.sent) == 4
    with pytest.raises(InvalidTransition):
        table.transition(row["id"], "failed")
    assert table.require(row["id"])["status"] == "completed"


def test_terminal_hook_runs_in_same_transaction(table):
    calls = []

    def hook(row):
        calls.append(row["status"])
        raise RuntimeError("hook failed")

    table.terminal_hooks.append(hook)
    row = table.create("background", goal="g")
    table.transition(row["id"], "starting")
    with pytest.raises(RuntimeError):
        table.transition(row["id"], "failed")
    assert calls == ["failed"]
    assert table.require(row["id"])["status"] == "starting"  # rolled back together


def test_events_of_a_nested_transaction_are_published_after_the_outer_commit(table):
    with table.store.transaction():
        row = table.create("background", goal="g")
        table.transition(row["id"], "starting")
        assert table.sent == []  # nothing is durable yet
    assert len(table.sent) == 2
    with pytest.raises(RuntimeError):
        with table.store.transaction():
            table.transition(row["id"], "running")
            raise RuntimeError("rolled back")
    assert len(table.sent) == 2 and table.require(row["id"])["status"] == "starting"
    table.transition(row["id"], "running")
    assert len(table.sent) == 3


def test_memo_reads_again_after_every_write_and_only_then(table):
    reads = []

    def counts():
        reads.append(1)
        return {r["status"]: r["n"] for r in table.store.all("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")}

    assert table.store.memo("counts", counts) == {} and len(reads) == 1
    assert table.store.memo("counts", counts) == {} and len(reads) == 1  # nothing written: not read again
    row = table.create("background", goal="g")
    assert table.store.memo("counts", counts) == {"queued": 1} and len(reads) == 2
    with pytest.raises(RuntimeError):
        with table.store.transaction():
            table.transition(row["id"], "starting")
            raise RuntimeError("rolled back")
    assert table.store.memo("counts", counts) == {"queued": 1} and len(reads) == 3
    table.transition(row["id"], "starting")
    assert table.store.memo("counts", counts) == {"starting": 1}
    table.store.db.execute("DELETE FROM jobs")
    assert table.store.memo("counts", counts) == {}


def test_after_commit_runs_every_callback_then_raises_the_first_error(tmp_path):
    store = Store(tmp_path / "state.db")
    ran = []

    def boom():
        ran.append("boom")
        raise ValueError("listener failed")

    with pytest.raises(ValueError, match="listener failed"):
        with store.transaction():
            store.after_commit(boom)
            store.after_commit(lambda: ran.append("next"))
    assert ran == ["boom", "next"]
    store.after_commit(lambda: ran.append("now"))  # outside a transaction: at once
    assert ran[-1] == "now"
    store.close()


def test_schema_version_and_newer_db_refused(tmp_path):
    store = Store(tmp_path / "s.db")
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == store.version
    store.db.execute(f"PRAGMA user_version={store.version + 1}")
    store.close()
    with pytest.raises(StoreError) as info:
        Store(tmp_path / "s.db")
    assert "newer" in str(info.value)


def test_scheduler_async_cap_rejects_or_queues():
    from hermesd.delegation.ops import ASYNC

    s = Scheduler({"global": 10, "async": 2})

    def admit(job, queue):
        return s.admit(job, ASYNC.name, queue=queue, refusal=ASYNC.refusal, setting=ASYNC.setting)

    assert admit("a", False) and admit("b", False)
    with pytest.raises(ProtocolError) as info:
        admit("c", False)
    assert info.value.code == "capacity_reached"
    assert str(info.value.message).startswith("2 background delegations are already running "
                                              "(delegation.max_async_children = 2); run this task")
    assert info.value.details == {"pool": "async", "limit": 2, "running": 2}
    assert admit("c", True) is False
    s.enqueue("c", ("async", "global"))
    assert s.take_startable() == []
    s.release("a")
    assert s.take_startable() == ["c"]


def test_scheduler_skips_full_group_but_keeps_order():
    s = Scheduler({"global": 3})
    s.set_limit("group:1", 1)
    for job, pools in (("g1", ("global", "group:1")), ("g2", ("global", "group:1")), ("x", ("global",))):
        s.enqueue(job, pools)
    assert s.take_startable() == ["g1", "x"]
    s.release("g1")
    assert s.take_startable() == ["g2"]
    assert s.usage()["global"] == {"used": 2, "limit": 3}
