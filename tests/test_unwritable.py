"""Another process holds ``state.db``'s write lock (a second connection in ``BEGIN IMMEDIATE``):
reads go on, a write waits its bounded time and fails ``state_unavailable`` (exit 12, no
traceback), a job that ends meanwhile reads as ended and its end — notification included —
is written as soon as the lock is gone, without a restart."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import psutil

from hermesd.protocol import EXIT_CODES
from hermesd.unwritable import WAIT_SECONDS
from tests.chaos.helpers import notifications, running_job
from tests.harness import wait_for


def _stored_status(d, job: str) -> str:
    with contextlib.closing(sqlite3.connect(d.home / "state.db")) as db:
        return db.execute("SELECT status FROM jobs WHERE id = ?", (job,)).fetchone()[0]


def test_a_locked_database_delays_writes_then_fails_typed_and_held_ends_are_written_after(make_daemon):
    d = make_daemon()
    job = d.delegate("ends while locked", background=True, script=[{"text": "done", "sleep": 2.0}])["id"]
    pid = running_job(d, job)["pid"]
    lock = sqlite3.connect(d.home / "state.db", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        assert d.call("status")["pid"] == d.proc.pid  # a read is not held up by the lock
        assert time.monotonic() - started < 2
        refused = d.ctl("delegate", "--background", "refused while locked")
        waited = time.monotonic() - started
        assert refused.returncode == EXIT_CODES["state_unavailable"] == 12, (refused.stdout, refused.stderr)
        assert "locked" in refused.stderr and "nothing was changed" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr + d.log()
        assert WAIT_SECONDS - 1 <= waited < WAIT_SECONDS + 10
        # the child finished meanwhile: its end cannot be written, yet nobody is told it runs
        wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                 30, what="the child gone")
        wait_for(lambda: d.call("job", id=job)["status"] == "completed", 10, what="the job read as ended")
        assert job not in {j["id"] for j in d.call("ps")["jobs"]}
        assert _stored_status(d, job) == "running"
    finally:
        lock.rollback()
        lock.close()
    wait_for(lambda: _stored_status(d, job) == "completed", 10, what="the held end written")
    assert notifications(d) == {job: 1}
    assert "written" in d.log()
    assert d.wait_job(d.delegate("after the lock")["id"])["status"] == "completed"
