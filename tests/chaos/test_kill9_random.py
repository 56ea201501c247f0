"""Randomised ``kill -9`` of the daemon while delegations, a session and a batch run.

Each round adds work (background delegations with grandchildren, session
messages and ``/background`` tasks of the session) and kills the daemon at a
random moment, checks that its children died with it, restarts it and checks
that nothing of the old daemon is left.  In the
end, once everything has settled:

* no job is stuck in a non-terminal state;
* every background job has exactly one completion event, and every
  ``/background`` result was delivered into its session exactly once;
* the batch wrote every prompt index exactly once (or discarded it once);
* event sequence numbers are unique and increasing.

The seed is printed (``HERMES_CHAOS_SEED`` replays a run).  The default is a
few rounds on cold start; ``HERMES_CHAOS_SOAK=N`` runs N rounds with each start
method.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.chaos.helpers import (SOAK, delivered, forkserver, live, notifications, of_daemon, settled, titled,
                                 warm_on_start)
from tests.harness import wait_for
from tests.test_batch_daemon import SCRIPTS, check_consistent, finish, read_run, start, write_dataset

SESSION = "chaos"
PROMPTS = 24
BATCH_SIZE = 5


def _delegation_script(rng: random.Random) -> list[dict]:
    steps = [{"thinking": "I work on it.", "text": "step", "sleep": round(rng.uniform(0.1, 1.5), 2),
              "tool_calls": [{"name": "terminal", "input": {"command": "sleep 60 & echo bg"}}]}]
    return steps + [{"text": "finished", "sleep": round(rng.uniform(0, 1.0), 2)}]


def _add_work(d, rng: random.Random, round_no: int) -> None:
    for i in range(rng.randint(2, 4)):
        d.delegate(f"round {round_no} task {i}", background=True, queue=True, script=_delegation_script(rng))
    for i in range(rng.randint(1, 2)):
        d.call("session.send", session=SESSION, text=f"/background round {round_no} errand {i}", cwd=str(d.work))
    d.call("session.send", session=SESSION, text=f"hello from round {round_no}", cwd=str(d.work))


def _crash_and_restart(d) -> None:
    """``kill -9``; the children die with the daemon at once.  What a child that
    had just exited left in its group (a background command) has lost both its
    child and the daemon that was about to kill it: the next daemon sweeps it."""
    jobs = d.call("ps", all=True)["jobs"]
    ids, pids, old = {j["id"] for j in jobs}, {j["pid"] for j in jobs if j.get("pid")}, d.proc.pid
    d.kill9()
    wait_for(lambda: not titled(ids) and not [p for p in pids if live(p)], 5, 0.05, "children dead with the daemon")
    d.start()  # queued jobs keep their ids and run again: look for the old daemon's processes by its pid
    wait_for(lambda: not of_daemon(old) and not [p for p in pids if live(p)], 10, 0.05, "old daemon's processes gone")


def _chaos(d, tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    print(f"chaos seed {seed}, {rounds} rounds")
    prompts = [{"prompt": f"prompt {i}", "script": SCRIPTS["no_reasoning"] if i % 7 == 3 else
                [{**SCRIPTS["normal"][0], "sleep": round(rng.uniform(0.05, 0.6), 2)}, SCRIPTS["normal"][1]]}
               for i in range(PROMPTS)]
    record = start(d, write_dataset(tmp_path / "prompts.jsonl", prompts), "chaos", batch_size=BATCH_SIZE,
                   num_workers=3)
    for round_no in range(rounds):
        _add_work(d, rng, round_no)
        time.sleep(rng.uniform(0.3, 2.5))  # the random moment of the crash
        _crash_and_restart(d)
    final = finish(d, record, timeout=300)
    assert final["status"] == "completed", final
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, BATCH_SIZE)
    written = [line["prompt_index"] for lines in run["batches"].values() for line in lines]
    assert sorted(written + [int(i) for i in run["checkpoint"]["discarded"]]) == list(range(PROMPTS))

    jobs = settled(d, timeout=300)
    background = [j for j in jobs if j["kind"] == "background"]
    errands = {j["id"] for j in background if j["session"] == SESSION}
    assert errands, "no /background task was started"
    wait_for(lambda: set(delivered(d, SESSION)) >= errands, 120, 0.1, "every errand delivered")
    jobs = settled(d, timeout=120)  # the delivery turns
    notes = notifications(d)
    assert {j["id"]: notes[j["id"]] for j in background} == {j["id"]: 1 for j in background}
    counts = delivered(d, SESSION)
    assert {job: counts[job] for job in errands} == {job: 1 for job in errands}
    assert set(counts) <= errands
    seqs = [e["seq"] for e in d.call("events_since", since=0, limit=1000000)["events"]]
    assert seqs == sorted(set(seqs))
    print(f"statuses: { {s: sum(j['status'] == s for j in jobs) for s in {j['status'] for j in jobs}} }")


def _seed() -> int:
    return int(os.environ.get("HERMES_CHAOS_SEED") or random.randrange(1 << 30))


def test_random_kill9_during_delegations_sessions_and_a_batch(make_daemon, tmp_path):
    d = make_daemon({"supervisor": {"max_children": 6}})
    _chaos(d, tmp_path, 3, _seed())


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="soak: set HERMES_CHAOS_SOAK=N")
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_soak_random_kill9(make_daemon, tmp_path, method):
    config = {"supervisor": {"max_children": 6}}
    d = make_daemon(forkserver(config) if method == "forkserver" else config, start=False)
    (warm_on_start(d) if method == "forkserver" else d).start()
    _chaos(d, tmp_path, SOAK, _seed())
