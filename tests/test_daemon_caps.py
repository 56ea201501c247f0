"""Caps with real processes: background rejection, --queue, global cap, cancel."""

from __future__ import annotations

import threading

import psutil

import pytest

from hermesd.protocol import ProtocolError
from tests.harness import wait_for, command_line

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

SLEEPY = [{"thinking": "working on it", "text": "started", "sleep": 30}]


def _is_child(proc) -> bool:
    """A hermes child process (by its title); one that ended since it was listed is not."""
    try:
        return "child" in command_line(proc)
    except psutil.Error:
        return False


class Sampler:
    """Samples ``count(daemon)`` in a thread (default: its live children, by psutil)."""

    def __init__(self, daemon, count=None):
        self.daemon = daemon
        self.count = count or (lambda d: sum(1 for p in d.children() if _is_child(p)))
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.count(self.daemon))
            self._stop.wait(0.01)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_five_background_against_cap_three(daemon):
    accepted, rejected = [], []
    with Sampler(daemon) as sampler:
        for i in range(5):
            try:
                accepted.append(daemon.delegate(f"task {i}", background=True, script=SLEEPY))
            except ProtocolError as err:
                rejected.append(err)
        wait_for(lambda: all(daemon.call("job", id=r["id"])["status"] == "running" for r in accepted),
                 what="3 children running")
        for rec in accepted:
            daemon.call("cancel", id=rec["id"])
        for rec in accepted:
            assert daemon.wait_job(rec["id"])["status"] == "cancelled"
    assert len(accepted) == 3 and len(rejected) == 2
    for err in rejected:
        assert err.code == "capacity_reached"
        assert "foreground" in err.message and "--queue" in err.message
    assert 1 <= sampler.peak <= 3
    assert all(rec["delegation_id"] == rec["id"] for rec in accepted)


def _running_jobs(daemon) -> int:
    return sum(1 for j in daemon.call("ps")["jobs"] if j["status"] in ("starting", "running"))


def test_queue_runs_all_five(make_daemon):
    """At most 3 background delegations *run* at once (a fourth starts when one has ended,
    while its process may still be exiting), and at most ``max_children`` processes live."""
    daemon = make_daemon({"supervisor": {"max_children": 4}})
    script = [{"text": "quick", "sleep": 0.3}]
    records = [daemon.delegate(f"task {i}", background=True, queue=True, script=script) for i in range(5)]
    with Sampler(daemon) as sampler, Sampler(daemon, _running_jobs) as running:
        finished = [daemon.wait_job(r["id"]) for r in records]
    assert [f["status"] for f in finished] == ["completed"] * 5
    assert running.peak <= 3 and sampler.peak <= 4


def test_slot_is_free_once_wait_returned(daemon):
    """What a client is told is what holds: the moment ``wait`` says the three background
    jobs ended, a fourth is admitted, although their processes may still be exiting
    (their ``global`` slots, which count processes, go back when they are reaped)."""
    for round_ in range(3):
        records = [daemon.delegate(f"r{round_} task {i}", background=True, script=[{"text": "quick"}])
                   for i in range(3)]
        for rec in records:
            assert daemon.wait_job(rec["id"])["status"] == "completed"
        fourth = daemon.delegate(f"r{round_} fourth", background=True, script=[{"text": "quick"}])
        assert daemon.wait_job(fourth["id"])["status"] == "completed"


def test_global_cap_queues_foreground(make_daemon):
    d = make_daemon({"supervisor": {"max_children": 2}})
    records = [d.delegate(f"fg {i}", script=[{"text": "ok", "sleep": 0.3}]) for i in range(4)]
    statuses = [d.call("job", id=r["id"])["status"] for r in records]
    assert statuses.count("queued") >= 2
    assert [d.wait_job(r["id"])["status"] for r in records] == ["completed"] * 4


def test_cancel_running_child_keeps_partial_output(daemon):
    script = [{"text": "first step done", "tool_calls": [{"name": "terminal", "input": {"command": "echo step1"}}]},
              {"sleep": 30, "text": "never"}]
    rec = daemon.delegate("cancel me", script=script)
    wait_for(lambda: daemon.call("job", id=rec["id"])["api_calls"] >= 1 and
             daemon.call("job", id=rec["id"])["status"] == "running", what="first step")
    wait_for(lambda: any(e["type"] == "job.progress" and (e["data"].get("tool") == "terminal")
                         for e in daemon.call("events_since", since=0)["events"]), what="tool progress")
    daemon.call("cancel", id=rec["id"])
    final = daemon.wait_job(rec["id"], timeout=10)
    assert final["status"] == "cancelled"
    assert "first step done" in (final["summary"] or "")
    with pytest.raises(ProtocolError) as info:
        daemon.call("cancel", id=rec["id"])
    assert info.value.code == "invalid_state"


def test_cancel_queued_job(make_daemon):
    d = make_daemon({"supervisor": {"max_children": 1}})
    first = d.delegate("holder", script=SLEEPY)
    second = d.delegate("waiting", script=SLEEPY)
    assert d.call("job", id=second["id"])["status"] == "queued"
    assert d.call("cancel", id=second["id"])["status"] == "cancelled"
    d.call("cancel", id=first["id"])
    assert d.wait_job(first["id"])["status"] == "cancelled"


def test_unknown_job_and_bad_cwd(daemon):
    with pytest.raises(ProtocolError) as info:
        daemon.call("wait", id="deleg_nope", timeout=0.1)
    assert info.value.code == "not_found"
    with pytest.raises(ProtocolError) as info:
        daemon.call("delegate", goal="x", cwd="/definitely/not/here")
    assert info.value.code == "bad_request" and "cwd" in info.value.message
    with pytest.raises(ProtocolError) as info:
        daemon.call("delegate", goal="x", toolsets=["terminal", "nope"])
    assert info.value.code == "bad_request" and "nope" in info.value.message
