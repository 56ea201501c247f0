"""Both sides of the stop races, and a start whose commit fails, through the OS seam
of procs.py (no real processes)."""

from __future__ import annotations

import signal
import sqlite3

import pytest
from dataclasses import replace
from types import SimpleNamespace

from hermesd.contract.wire import JobSpec

from hermesd.config import Config, Supervisor
from hermesd.events import EventLog
from hermesd.jobs import JobTable
from hermesd.system.procs import ProcessManager
from hermesd.runner import Runner
from hermesd.scheduler import Scheduler
from hermesd.store import Store, StoreError


class FakeHandle:
    def __init__(self, pid):
        self.pid = pid
        self.returncode = None


class FakeOS:
    """Records signals; processes 'exit' when the test says so."""

    def __init__(self):
        self.signals = []
        self.exited = []
        self.alive = set()
        self.next_pid = 1000

    def spawn(self, argv, *, cwd, env, log_path):
        self.next_pid += 1
        self.alive.add(self.next_pid)
        self.env = env
        return FakeHandle(self.next_pid)

    def kill(self, pid, sig):
        self.signals.append(("kill", pid, sig))
        return pid in self.alive

    def killpg(self, pgid, sig):
        self.signals.append(("killpg", pgid, sig))
        return pgid in self.alive

    def reap(self):
        out, self.exited = self.exited, []
        return out

    def descendants_with_env(self, key, value, skip=frozenset()):
        return []

    def start_time(self, pid):
        return 0.0


class FakeLoop:
    def __init__(self):
        self.timers = []

    def call_later(self, delay, fn, *args):
        timer = Timer(delay, fn, args)
        self.timers.append(timer)
        return timer

    def fire_all(self):
        for timer in sorted(self.timers, key=lambda t: t.delay):
            if not timer.cancelled:
                timer.fn(*timer.args)


class Timer:
    def __init__(self, delay, fn, args):
        self.delay, self.fn, self.args, self.cancelled = delay, fn, args, False

    def cancel(self):
        self.cancelled = True


def _manager():
    fake, loop, exits = FakeOS(), FakeLoop(), []
    pm = ProcessManager(loop, exits.append, os_seam=fake, grace=1.0, supervisor_id="sup")
    return pm, fake, loop, exits


def test_stop_escalates_sigint_sigterm_sigkill(tmp_path):
    pm, fake, loop, exits = _manager()
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={"NOTIFY_SOCKET": "/x"})
    assert "NOTIFY_SOCKET" not in fake.env and fake.env["HERMES_JOB_ID"] == "j1"
    pm.stop("j1", "cancel")
    loop.fire_all()
    assert fake.signals == [("kill", child.pid, signal.SIGINT), ("killpg", child.pid, signal.SIGTERM),
                            ("killpg", child.pid, signal.SIGKILL)]


def test_child_exiting_during_stop_cancels_escalation(tmp_path):
    pm, fake, loop, exits = _manager()
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={})
    pm.stop("j1", "cancel")
    fake.alive.discard(child.pid)
    fake.exited.append((child.pid, 0))
    pm.reap()
    assert exits and exits[0].stop_reason == "cancel" and exits[0].returncode == 0
    before = list(fake.signals)
    loop.fire_all()
    assert fake.signals == before  # timers were cancelled: no signal to a reused pid


def test_kill_finding_process_gone_is_normal(tmp_path):
    pm, fake, loop, exits = _manager()
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={})
    fake.alive.discard(child.pid)  # exited, not yet reaped: ESRCH on every signal
    assert pm.stop("j1", "shutdown") is True
    loop.fire_all()
    fake.exited.append((child.pid, -9))
    pm.reap()
    assert exits[0].returncode == -9 and "j1" not in pm.children


def test_unknown_pid_reaped_silently(tmp_path):
    pm, fake, loop, exits = _manager()
    fake.exited.append((4242, 0))  # an orphaned grandchild re-parented to the subreaper
    pm.reap()
    assert exits == []


class RefusingCommit:
    """A sqlite3 connection whose ``COMMIT`` fails while ``refuse`` is set (a full disk)."""

    def __init__(self, db):
        self.db, self.refuse = db, False

    def execute(self, sql, *args):
        if self.refuse and sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def _runner(tmp_path, plugins=None, limits=None):
    store = Store(tmp_path / "state.db")
    sent = []
    jobs = JobTable(store, EventLog(store, sent.append), plugins.kinds if plugins else None)
    fake, loop = FakeOS(), FakeLoop()
    exits = []
    pm = ProcessManager(loop, exits.append, os_seam=fake, grace=1.0, supervisor_id="sup")
    config = Config(supervisor=Supervisor(log_dir=str(tmp_path / "jobs")))
    runner = Runner(config, jobs, Scheduler(limits or {"global": 2}), pm, tmp_path / "children.sock", loop, plugins)
    pm.on_exit = runner.on_exit
    store.db = RefusingCommit(store.db)
    return runner, store, fake, sent


def test_a_job_that_starts_at_once_is_committed_with_its_start(tmp_path):
    runner, store, fake, sent = _runner(tmp_path)
    row = runner.submit("background", goal="g", cwd=str(tmp_path))
    assert row["status"] == "starting" and row["pid"] in fake.alive
    types = [(e["type"], e["data"].get("status")) for e in runner.jobs.events.since(0)]
    assert types == [("job.queued", None), ("job.state", "starting")]
    assert len(sent) == 2  # both published, in order, after the one commit


def test_a_start_whose_commit_fails_leaves_no_child_and_no_row(tmp_path):
    runner, store, fake, sent = _runner(tmp_path)
    store.db.refuse = True
    with pytest.raises(StoreError, match="disk is full"):
        runner.submit("background", goal="g", cwd=str(tmp_path))
    (pid,) = fake.alive
    assert ("killpg", pid, signal.SIGKILL) in fake.signals, "the child no row shows must be killed"
    assert sent == [] and store.db.in_transaction is False
    store.db.refuse = False
    assert runner.jobs.list() == []
    fake.alive.discard(pid)
    fake.exited.append((pid, -9))
    runner.procs.reap()  # the reaper finds no row: it gives the slot back, nothing else
    assert runner.scheduler.usage()["global"]["used"] == 0 and runner.tokens == {}
    assert runner.submit("background", goal="again", cwd=str(tmp_path))["status"] == "starting"


class RecordingSpawner:
    """A start strategy (as the warm one is): it starts children; signals stay with the OS seam."""

    method = "test"

    def __init__(self, fake):
        self.fake, self.started, self.heard = fake, [], []

    def start(self):
        pass

    def spawn(self, argv, *, cwd, env, log_path):
        self.started.append(argv)
        return self.fake.spawn(argv, cwd=cwd, env=env, log_path=log_path)

    def reaped(self, exits):
        self.heard.extend(exits)

    def describe(self):
        return {"method": self.method}

    def own_pids(self):
        return frozenset()

    def close(self):
        pass


def test_the_spawner_starts_children_and_hears_every_exit_signals_go_through_the_seam(tmp_path):
    fake, loop, exits = FakeOS(), FakeLoop(), []
    spawner = RecordingSpawner(fake)
    pm = ProcessManager(loop, exits.append, os_seam=fake, spawner=spawner, grace=1.0, supervisor_id="sup")
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={}, title=["delegation", "goal"])
    assert spawner.started[0][-4:] == ["child", "j1", "delegation", "goal"]
    pm.stop("j1", "cancel")
    assert fake.signals == [("kill", child.pid, signal.SIGINT)]
    fake.exited += [(child.pid, 0), (4242, 0)]  # its child, and one of the spawner's (a zygote, a spare)
    pm.reap()
    assert spawner.heard == [(child.pid, 0), (4242, 0)] and [c.job for c in exits] == ["j1"]


def test_without_a_spawner_children_start_cold_through_the_seam(tmp_path):
    pm, fake, loop, exits = _manager()
    assert pm.spawner.describe() == {"method": "spawn"}
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={})
    assert child.pid in fake.alive


def test_a_kind_declares_the_pool_its_jobs_hold_from_admission(tmp_path):
    """The runner names no pool: a kind's ``pool`` is taken at admission, refused when full
    (its own message) unless queued, and waited for when paused."""
    from hermesd.jobs import AdmissionPool, JobKind
    from hermesd.plugin import Plugin, Plugins
    from hermesd.protocol import ProtocolError

    class Held(Plugin):
        kinds = (JobKind("held", "held", pool=AdmissionPool("x", "{running} held ({setting} = {limit})", "x.max")),
                 JobKind("free", "free"))

    runner, store, fake, sent = _runner(tmp_path, Plugins((Held,)), {"global": 5, "x": 1})
    first = runner.submit("held", goal="g", cwd=str(tmp_path))
    assert first["status"] == "starting" and runner.scheduler.count["x"] == 1
    with pytest.raises(ProtocolError, match=r"^1 held \(x.max = 1\)$") as info:
        runner.submit("held", goal="g", cwd=str(tmp_path))
    assert info.value.code == "capacity_reached" and info.value.details["pool"] == "x"
    waits = runner.submit("held", goal="g", cwd=str(tmp_path), queue=True)
    assert waits["status"] == "queued" and runner.scheduler.queue[-1].pools == ("x", "global")
    assert runner.submit("free", goal="g", cwd=str(tmp_path))["status"] == "starting"
    runner.requeue(runner.jobs.require(waits["id"]))
    assert runner.scheduler.queue[-1].pools == ("x", "global")


def test_a_childs_spec_takes_the_defaults_its_kind_declares(tmp_path):
    from hermesd.jobs import JobKind
    from hermesd.plugin import Plugin, Plugins

    class Own(Plugin):
        kinds = (JobKind("own", "own"), JobKind("plain", "plain"))

        def spec_defaults(self, row):
            return {"max_turns": 3, "model": None, "auto_approve": True} if row["kind"] == "own" else {}

    plugins = Plugins((Own,))
    runner, store, fake, sent = _runner(tmp_path, plugins)
    runner.config = replace(runner.config, model="top", delegation=replace(runner.config.delegation, max_turns=9))
    plugins.start(SimpleNamespace())
    own = runner.child_spec({"id": "own_1", "kind": "own", "spec": {}})
    assert (own["max_turns"], own["model"], own["auto_approve"]) == (3, "top", True)
    plain = runner.child_spec({"id": "plain_1", "kind": "plain", "spec": {"max_turns": 4}})
    assert (plain["max_turns"], plain["auto_approve"]) == (4, False)  # the spec's own default, then the job's
    assert runner.child_spec({"id": "plain_2", "kind": "plain", "spec": {}})["max_turns"] == JobSpec().max_turns


def test_a_kind_names_its_entry_point_and_its_own_part_of_the_spec(tmp_path):
    """The child's spec carries its kind's entry point and its kind's own part: the keys of the job's
    spec that are fields of the kind's part (``JobKind.spec``), its defaults for the rest; a kind
    without a part gets none, and a key no part or spec field knows stays the daemon's."""
    from dataclasses import dataclass

    from hermesd.contract.wire import Wire
    from hermesd.jobs import JobKind
    from hermesd.plugin import Plugin, Plugins

    @dataclass
    class Nap(Wire):
        seconds: float = 1.0
        why: str = "tired"

    class Sleep(Plugin):
        kinds = (JobKind("nap", "nap", entry="child.nap:run", spec=Nap), JobKind("plain", "plain"))

    plugins = Plugins((Sleep,))
    runner, store, fake, sent = _runner(tmp_path, plugins)
    plugins.start(SimpleNamespace())
    nap = runner.child_spec({"id": "nap_1", "kind": "nap", "spec": {"seconds": 2.5, "max_turns": 4, "after": ["x"]}})
    assert (nap["entry"], nap["part"], nap["max_turns"]) == ("child.nap:run", {"seconds": 2.5, "why": "tired"}, 4)
    assert "seconds" not in nap and "after" not in nap
    plain = runner.child_spec({"id": "plain_1", "kind": "plain", "spec": {"seconds": 2.5}})
    assert (plain["entry"], plain["part"]) == ("child.agent:run", None) and "seconds" not in plain


def test_a_kind_declares_when_its_quiet_jobs_are_stale(tmp_path):
    """The runner reads no config for the stale rule: each kind's plugin says (``stale_after``);
    the check runs a quarter of the shortest limit on, and a kind that declares none is never stale."""
    from hermesd.jobs import JobKind
    from hermesd.plugin import Plugin, Plugins

    class Watched(Plugin):
        kinds = (JobKind("watched", "w"), JobKind("free", "free"))

        def stale_after(self, row):
            return 8.0 if row["kind"] == "watched" else None

    plugins = Plugins((Watched,))
    runner, store, fake, sent = _runner(tmp_path, plugins, {"global": 5})
    plugins.start(SimpleNamespace())
    free = runner.submit("free", goal="g", cwd=str(tmp_path))
    assert runner.loop.timers == [], "no job with a limit: no check"
    watched = runner.submit("watched", goal="g", cwd=str(tmp_path))
    (timer,) = runner.loop.timers
    assert timer.delay == 2.0
    for job in (free["id"], watched["id"]):
        at, iso = runner.activity.jobs[job]
        runner.activity.jobs[job] = (at - 3600, iso)  # an hour quiet
    runner.check_stale()
    assert runner.stop_errors[watched["id"]].startswith("stale: no activity for 3600s")
    assert free["id"] not in runner.stop_errors


def test_every_plugin_adds_to_any_childs_environment_and_spec(tmp_path):
    """The runner names no plugin's setting: the log cap (upkeep) and the tools that wait for a
    person (approvals) reach every child through the ``child_env`` and ``any_spec`` hooks; the
    job's own spec still comes after them."""
    from hermesd import config
    from hermesd.control.approvals import ApprovalsPlugin
    from hermesd.contract.launch import LOG_CAP_ENV
    from hermesd.jobs import JobKind
    from hermesd.plugin import Plugin, Plugins
    from hermesd.upkeep.ops import UpkeepPlugin

    class Plain(Plugin):
        kinds = (JobKind("plain", "plain"),)

    cfg = config.parse("logs: {max_bytes: 8192, keep: 3}\napprovals: {always: [terminal]}\n")
    ctx = SimpleNamespace(config=cfg)
    plugins = Plugins((Plain,))
    plugins.start(ctx)
    plugins.instances += [Plugin.__new__(UpkeepPlugin), Plugin.__new__(ApprovalsPlugin)]
    for plugin in plugins.instances:
        plugin.ctx = ctx
    runner, store, fake, sent = _runner(tmp_path, plugins)
    row = runner.submit("plain", goal="g", cwd=str(tmp_path))
    assert fake.env[LOG_CAP_ENV] == "8192:3"
    assert runner.child_spec(runner.jobs.require(row["id"]))["approval_tools"] == ["terminal"]
    assert runner.child_spec({"id": "plain_2", "kind": "plain", "spec": {"approval_tools": []}})["approval_tools"] == []
