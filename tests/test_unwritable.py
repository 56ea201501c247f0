"""Another process holds ``state.db``'s write lock (a second connection in ``BEGIN IMMEDIATE``):
reads go on, a write waits its bounded time and fails ``state_unavailable`` (exit 12, no
traceback), a job that ends meanwhile reads as ended and its end — notification included —
is written as soon as the lock is gone, without a restart."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import psutil

from hermesd.protocol import EXIT_CODES, ProtocolError
from hermesd.unwritable import WAIT_SECONDS
from tests.chaos.helpers import notifications, running_job
from tests.harness import wait_for
from tests.test_batch_daemon import SCRIPTS, finish, start, write_dataset


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


def test_a_batch_run_refused_while_the_database_is_locked_can_be_asked_again(daemon, tmp_path):
    # Found by the soak (issue 44): batch.run opened the run's folder (checkpoint.json, README.md),
    # then could not store its job; the request was run again (it had committed nothing to the
    # database) and found its own folder: "already holds run", for ever after, without --resume.
    dataset = write_dataset(tmp_path / "p.jsonl", [{"prompt": "one", "script": SCRIPTS["normal"]}])
    lock = sqlite3.connect(daemon.home / "state.db", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        try:
            start(daemon, dataset, "locked")
        except ProtocolError as exc:
            assert exc.code == "state_unavailable", exc
        else:
            raise AssertionError("batch.run stored its job under another process's write lock")
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert not (daemon.base / "out" / "locked").exists() or not any((daemon.base / "out" / "locked").iterdir())
    assert finish(daemon, start(daemon, dataset, "locked"))["status"] == "completed"
