"""Retention: finished jobs with their folders and events go, by policy or `hermesctl clean`;
what is still needed stays; a client reading removed events is told so."""

from __future__ import annotations

import json
import sqlite3

import yaml

from tests.harness import wait_for
from tests.test_lists_scale import insert_jobs


def _ids(daemon) -> set[str]:
    c = daemon.conn()
    try:
        return {j["id"] for j in c.jobs(all=True)}
    finally:
        c.close()


def test_policy_keeps_the_newest_jobs_and_says_where_events_were_removed(make_daemon):
    d = make_daemon(config={"retention": {"max_jobs": 3, "interval_seconds": 1, "batch_size": 2}})
    done = [d.wait_job(d.delegate(f"goal {i}")["id"])["id"] for i in range(7)]
    wait_for(lambda: _ids(d) == set(done[-3:]) and not any((d.home / "jobs" / job).exists() for job in done[:4])
             and all(e["job"] not in done[:4] for e in d.call("events_since", since=0)["events"]),
             timeout=30, what="the 4 oldest jobs removed, with their folders and (oldest first) their events")
    assert all((d.home / "jobs" / job).is_dir() for job in done[-3:])
    page = d.call("events_since", since=0)
    oldest = page["oldest_seq"]
    assert oldest > 1 and page["gap"] == {"since": 0, "oldest_seq": oldest}
    assert page["events"][0]["seq"] == oldest
    c = d.conn()
    try:
        first = next(iter(c.follow(0, follow=False)))
    finally:
        c.close()
    assert first["type"] == "events.removed" and first["seq"] == oldest - 1
    out = d.ctl("events", "--since", "0")
    assert f"events 1..{oldest - 1} were removed by retention" in out.stdout.splitlines()[0]
    assert "Traceback" not in d.log()


def test_a_reload_that_adds_a_policy_applies_it_at_once(daemon):
    done = [daemon.wait_job(daemon.delegate(f"goal {i}")["id"])["id"] for i in range(3)]
    config = yaml.safe_load((daemon.home / "config.yaml").read_text())
    config["retention"] = {"max_jobs": 1}  # the default interval: five minutes
    (daemon.home / "config.yaml").write_text(yaml.safe_dump(config))
    assert daemon.ctl("reload").returncode == 0
    wait_for(lambda: _ids(daemon) == {done[-1]}, timeout=15, what="the policy applied after the reload")


def test_clean_never_removes_what_is_still_needed(daemon):
    old = insert_jobs(daemon, 30)
    live = insert_jobs(daemon, 1, status="running", prefix="deleg_live")
    undelivered = insert_jobs(daemon, 1, prefix="bg_pending")
    batch = insert_jobs(daemon, 1, status="running", prefix="batch_run")
    item = insert_jobs(daemon, 1, prefix="item_of_running_batch")
    kept = insert_jobs(daemon, 1, prefix="deleg_worktree_kept")
    db = sqlite3.connect(daemon.home / "state.db", timeout=10)
    with db:
        for job, state in ((kept[0], "kept"), (old[1], "removed")):
            db.execute("UPDATE jobs SET spec = json_object('worktree', json_object('path', '/w', 'state', ?)) "
                       "WHERE id = ?", (state, job))
        db.execute("INSERT INTO notifications (job, block, state, created_at) VALUES (?, 'b', 'pending', 'x')",
                   undelivered)
        db.execute("UPDATE jobs SET status='running', completed_at=NULL WHERE id = ?", batch)
        db.execute("UPDATE jobs SET kind='batch_item', parent=? WHERE id = ?", (batch[0], item[0]))
    db.close()
    (daemon.home / "jobs" / old[0]).mkdir(parents=True)
    (daemon.home / "jobs" / old[0] / "log").write_text("x")
    out = daemon.ctl("clean", "--older-than", "1d", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["jobs"] == 30
    assert len(_ids(daemon)) == 35, "a dry run removes nothing"
    out = daemon.ctl("clean", "--older-than", "1d")
    assert out.returncode == 0 and "removed 30 jobs" in out.stdout, out.stdout + out.stderr
    assert _ids(daemon) == {*live, *undelivered, *batch, *item, *kept}
    assert not (daemon.home / "jobs" / old[0]).exists()
    out = daemon.ctl("clean")
    assert out.returncode == 2 and "no retention policy" in out.stderr
    out = daemon.ctl("clean", "--older-than", "soon")
    assert out.returncode == 2 and "not a duration" in out.stderr
