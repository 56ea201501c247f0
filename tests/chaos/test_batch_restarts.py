"""A batch over a ``kill -9`` of hermesd, a graceful stop soon after its restart, and a
``state.db`` another process holds write-locked for a few seconds while the batch resumes.

The daemon that starts after the crash re-owns the batch's queued items (``max_children``
below ``num_workers``: some wait in the queue at any moment) and reruns the lost ones; a
``SIGTERM`` while it does so (at once, or a little later) leaves the rest to the next daemon.
While ``state.db`` cannot be written, items still end, and the prompts their slots free cannot
be handed out: they wait, and go once the database takes writes again (an item whose start could
not be written ends ``failed``, and the batch's resume runs it).  In the end the batch is
``completed`` with every prompt once in its files and no item of it left behind.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.chaos.helpers import TERMINAL, all_jobs
from tests.harness import wait_for
from tests.test_batch_daemon import THINK, check_consistent, read_run, start, write_dataset

PROMPTS = 40
BATCH_SIZE = 10
WORKERS = 4
LOCKED_SECONDS = 3.0
"""How long another process holds ``state.db``'s write lock (the soak's ``dblock`` fault: 1-4 s)."""


def _progress(d, job: str) -> dict:
    return d.call("batch.status", id=job).get("progress") or {}


@pytest.mark.parametrize("pause", [0.0, 1.5])
def test_a_batch_survives_kill9_a_sigterm_while_it_resumes_and_a_locked_state_db(make_daemon, tmp_path, pause):
    d = make_daemon({"supervisor": {"max_children": 3}})
    dataset = write_dataset(tmp_path / "prompts.jsonl", [
        {"prompt": f"prompt {i}", "script": [{**THINK, "sleep": 0.2 + 0.1 * (i % 3)}, {"text": "done"}]}
        for i in range(PROMPTS)])
    record = start(d, dataset, "restarts", batch_size=BATCH_SIZE, num_workers=WORKERS)
    wait_for(lambda: _progress(d, record["id"]).get("done", 0) >= 4, 60, 0.05, "some prompts done")
    d.kill9()
    d.start()
    time.sleep(pause)  # the moment of the graceful stop, while the new daemon resumes the batch
    assert d.stop() == 0
    d.start()
    done = _progress(d, record["id"]).get("done", 0)
    wait_for(lambda: _progress(d, record["id"]).get("done", 0) > done, 60, 0.05, "the batch going on")
    lock = sqlite3.connect(d.home / "state.db", isolation_level=None)  # another process's write lock
    lock.execute("BEGIN IMMEDIATE")
    try:
        time.sleep(LOCKED_SECONDS)  # the fault's length: items end meanwhile, the prompts after them wait
    finally:
        lock.rollback()
        lock.close()

    final = _ended(d, record)
    failed = read_run(Path(final["run_dir"]))["checkpoint"]["failed"]
    # an item whose start could not be written while the lock was held ends failed, naming the database;
    # the batch's resume runs it again
    assert all("state database" in entry["error"] for entry in failed.values()), failed
    if failed:
        final = _ended(d, start(d, dataset, "restarts", resume=True))
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, BATCH_SIZE)
    written = sorted(line["prompt_index"] for lines in run["batches"].values() for line in lines)
    assert written == list(range(PROMPTS)), f"missing {sorted(set(range(PROMPTS)) - set(written))}"
    wait_for(lambda: all(j["status"] in TERMINAL for j in all_jobs(d) if j["kind"] == "batch_item"), 30, 0.1,
             "every item of the batch ended")


def _ended(d, record: dict) -> dict:
    """Wait for the batch to end ``completed``; returns its ``batch.status`` (fails naming its live items)."""
    answer = d.conn(timeout=125).call("wait", 125, id=record["id"], timeout=120)
    final = d.call("batch.status", id=record["id"])
    items = [j for j in all_jobs(d) if j["kind"] == "batch_item"]
    assert answer["done"] and final["status"] == "completed", (
        final["status"], final["progress"], [(j["id"], j["status"]) for j in items if j["status"] not in TERMINAL])
    return final
