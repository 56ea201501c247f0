"""The state directory fills up or turns read-only.

* File-size limit (``RLIMIT_FSIZE`` set on the running daemon, any user):
  state writes fail; requests get a typed error naming the state database and
  the cause; the daemon stays up; after a restart without the limit the
  database is intact and every job settles.
* Disk full (a small tmpfs as ``HERMES_HOME``; needs root): the same, and once
  space is freed the running daemon works again without a restart.
* Read-only state directory (a read-only bind mount as root, else
  ``chmod a-w``): at start, a one-line error naming the database and a
  non-zero exit, the files untouched; while running, new jobs fail with an
  error naming the read-only path, and work again once it is writable.
"""

from __future__ import annotations

import contextlib
import hashlib
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path


from hermesd.protocol import ERROR_CODES, ProtocolError
from tests.chaos.helpers import TERMINAL, assert_no_leftovers, mounted, read_only, running_job, settled
from tests.harness import wait_for



def _integrity(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        seqs = [r[0] for r in conn.execute("SELECT seq FROM events ORDER BY seq")]
        assert len(seqs) == len(set(seqs))


def _fill(d, count: int, enough: int = 2) -> list[ProtocolError]:
    """Ask for up to ``count`` delegations (with large goals) until ``enough`` failed (each
    failure waits its bounded time first: ``hermesd.unwritable``); returns the errors."""
    errors = []
    for i in range(count):
        try:
            d.delegate(f"fill {i} " + "x" * 4000, script=[{"text": "y" * 4000}])
        except ProtocolError as err:
            errors.append(err)
            if len(errors) >= enough:
                break
    return errors


def _assert_state_errors(errors: list[ProtocolError], causes: tuple[str, ...]) -> None:
    assert errors, "the state never stopped taking writes"
    for err in errors:
        assert err.code in ERROR_CODES
        assert "state database" in err.message and any(c in err.message for c in causes), err.message


def test_file_size_limit_on_the_state_database(make_daemon):
    d = make_daemon()
    limit = max(p.stat().st_size for p in d.home.iterdir() if p.is_file()) + 300_000
    resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    errors = _fill(d, 200)
    _assert_state_errors(errors, ("disk I/O error", "database or disk is full"))
    assert d.call("hello")["pid"] == d.proc.pid and d.proc.poll() is None
    d.kill9()  # a graceful stop cannot write its final states either
    d.start()  # a new process: no limit
    _integrity(d.home / "state.db")
    settled(d)
    assert d.wait_job(d.delegate("after the limit")["id"])["status"] == "completed"


@contextlib.contextmanager
def _on_small_tmpfs(make_daemon):
    """A started daemon whose ``HERMES_HOME`` is a small tmpfs (root only), cleaned up after."""
    d = make_daemon(start=False)
    config = (d.home / "config.yaml").read_bytes()
    with mounted("tmpfs", d.home):
        (d.home / "config.yaml").write_bytes(config)
        try:
            yield d.start()
        finally:
            d.cleanup()


def _fill_disk(d) -> Path:
    """Fill ``HERMES_HOME`` (a small tmpfs); returns the file to remove to free it."""
    filler = d.home / "filler"
    subprocess.run(["sh", "-c", f"head -c 8000000 /dev/zero > {filler}"], capture_output=True)
    return filler


def test_disk_full_then_space_freed(make_daemon):
    with _on_small_tmpfs(make_daemon) as d:
        assert d.wait_job(d.delegate("before")["id"])["status"] == "completed"
        filler = _fill_disk(d)
        errors = _fill(d, 100)
        _assert_state_errors(errors, ("database or disk is full", "disk I/O error"))
        assert d.call("hello")["pid"] == d.proc.pid
        filler.unlink()
        rec = wait_for(lambda: _try_delegate(d), 30, 0.2, "a delegation accepted again")
        assert d.wait_job(rec["id"])["status"] in TERMINAL
        assert d.stop() == 0
        _integrity(d.home / "state.db")


def test_a_job_ending_on_a_full_disk_reads_ended_and_its_end_is_written_once_space_is_back(make_daemon):
    with _on_small_tmpfs(make_daemon) as d:
        job = d.delegate("ends on a full disk", background=True, script=[{"text": "done", "sleep": 3.0}])["id"]
        running_job(d, job)
        # the disk fills while the model is asked (its goal journaled): a step waits for the disk
        # (tests/chaos/test_journal_disk.py), the final answer, which no step follows, does not
        journal = d.home / "jobs" / job / "journal.jsonl"
        wait_for(lambda: journal.exists() and journal.read_bytes().endswith(b"\n"), 30, what="its goal journaled")
        filler = _fill_disk(d)
        wait_for(lambda: d.call("job", id=job)["status"] in TERMINAL, 30, what="the job read as ended")
        assert _stored(d, job) == "running"  # not written yet: no space
        filler.unlink()
        wait_for(lambda: _stored(d, job) in TERMINAL, 15, what="its end written without a restart")
        assert [e["job"] for e in d.call("events_since", since=0, types=["async_delegation"])["events"]] == [job]
        assert d.stop() == 0


def _stored(d, job: str) -> str:
    with contextlib.closing(sqlite3.connect(d.home / "state.db")) as db:
        return db.execute("SELECT status FROM jobs WHERE id = ?", (job,)).fetchone()[0]


def _try_delegate(d) -> dict | None:
    try:
        return d.delegate("after freeing space")
    except ProtocolError:
        return None


def test_read_only_state_directory_at_start(make_daemon):
    d = make_daemon()
    assert d.wait_job(d.delegate("before")["id"])["status"] == "completed"
    assert d.stop() == 0
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.home.iterdir() if p.is_file()}
    with read_only(d.home):
        out = subprocess.run([sys.executable, "-m", "hermesd.cli", "run"], env=d.env, capture_output=True,
                             text=True, timeout=60)
    assert out.returncode != 0
    assert str(d.home / "state.db") in out.stderr and "Traceback" not in out.stderr, out.stderr
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.home.iterdir() if p.is_file()}
    assert after == before
    d.start()
    _integrity(d.home / "state.db")


def test_state_directory_turns_read_only_while_running(make_daemon):
    d = make_daemon()
    with read_only(d.home):
        recs = [d.delegate(f"while read-only {i}") for i in range(3)]
        failed = [d.wait_job(r["id"]) for r in recs]
        assert d.call("hello")["pid"] == d.proc.pid
    for job in failed:
        assert job["status"] == "failed" and str(d.home) in job["error"], job["error"]
    assert d.wait_job(d.delegate("writable again")["id"])["status"] == "completed"
    assert_no_leftovers(d, {r["id"] for r in recs})
    assert d.stop() == 0
    _integrity(d.home / "state.db")
