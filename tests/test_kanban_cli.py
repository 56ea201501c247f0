"""``hermesctl kanban`` against a real daemon on the scripted provider: a worker
that never calls kanban_complete fails its attempts until the task blocks with
the reason; spawn failures block too; comment, unblock, link, archive, list,
show and watch, with and without --json; the board survives a kill -9 of the
daemon and its claims are repaired at restart."""

from __future__ import annotations

import json
import shutil

import pytest

from client import ctl  # noqa: F401 - hermesctl first: it loads its command families (kanban among them)
from client.kanban import can_move
from tests.harness import wait_for

CONFIG = {"kanban": {"dispatch_interval_seconds": 0.2, "max_spawn_failures": 2},
          "supervisor": {"max_children": 4}}


def _json_lines(out) -> list[dict]:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _show(d, task_id) -> dict:
    return _json_lines(d.ctl("kanban", "show", task_id, "--json"))[0]


@pytest.fixture
def d(make_daemon):
    daemon = make_daemon(CONFIG)
    out = daemon.ctl("profile", "create", "scribe", "--description", "Writes notes", "--provider", "scripted",
                     "--toolsets", "file")
    assert out.returncode == 0, out.stderr
    return daemon


def test_worker_without_a_result_blocks_the_task_and_people_steer_it(d):
    created = _json_lines(d.ctl("kanban", "create", "write the notes", "--assignee", "scribe", "--body",
                                "Write notes.md", "--priority", "2", "--json"))[0]
    task = created["id"]
    assert created["status"] == "ready" and created["assignee"] == "scribe" and created["priority"] == 2
    behind = _json_lines(d.ctl("kanban", "create", "read the notes", "--assignee", "scribe", "--parent", task,
                               "--json"))[0]["id"]
    # ends although `behind` stays todo: its parent blocks, and then only people can move it
    events = _json_lines(d.ctl("kanban", "watch", "--since", "0", "--until-settled", "--json", timeout=180))
    assert _show(d, behind)["status"] == "todo"
    assert all(e["type"].startswith("kanban.") for e in events)
    assert [e["type"] for e in events].count("kanban.claimed") == 2
    shown = _show(d, task)
    assert {"id", "status", "assignee", "result"} <= set(shown)
    assert shown["status"] == "blocked" and shown["attempts"] == 2 and shown["result"] is None
    assert "blocked after 2 failed attempt(s)" in shown["block_reason"]
    assert "without calling kanban_complete" in shown["block_reason"]
    # two separate worker processes ran and ended; nothing is left running
    workers = [e["data"]["worker"] for e in events if e["type"] == "kanban.claimed"]
    assert len(set(workers)) == 2 and all(d.call("job", id=w)["kind"] == "kanban_worker" for w in workers)
    wait_for(lambda: not d.call("ps")["jobs"], timeout=60, what="no worker left")

    text = d.ctl("kanban", "list").stdout
    assert task in text and "blocked" in text and "write the notes" in text
    assert d.ctl("kanban", "comment", task, "the notes go in notes.md").returncode == 0
    assert d.ctl("kanban", "unblock", task, "--note", "try again").returncode == 0
    follow = _show(d, task)
    assert [c["text"] for c in follow["comments"]] == ["the notes go in notes.md", "try again"]
    wait_for(lambda: _show(d, task)["attempts"] >= 3, timeout=60, what="a third attempt after unblock")
    # the next worker was told the comments and why the last attempt failed
    worker = d.call("job", id=_show(d, task)["worker"])
    assert "try again" in worker["context"] and "previous one failed" in worker["context"]
    archived = _json_lines(d.ctl("kanban", "archive", task, "--json"))[0]
    assert archived["status"] == "archived"
    assert d.wait_job(worker["id"], timeout=60)["status"] in ("interrupted", "failed", "completed")
    assert [t["id"] for t in _json_lines(d.ctl("kanban", "list", "--json"))] == [behind]
    every = _json_lines(d.ctl("kanban", "list", "--archived", "--json"))
    # a task behind a parent archived unfinished would wait forever: it is blocked, and says how to go on
    assert [(t["id"], t["status"]) for t in every] == [(task, "archived"), (behind, "blocked")]
    assert _show(d, behind)["block_reason"] == f"parent {task} archived unfinished"
    refused = d.ctl("kanban", "unblock", behind)
    assert refused.returncode == 6 and f"unlink it first (hermesctl kanban unlink {task} {behind})" in refused.stderr
    seq = d.call("events_since", since=0, limit=1)["last_seq"]
    assert d.ctl("kanban", "unlink", task, behind).returncode == 0  # it goes on without the archived parent
    moved = [(e["type"], e["data"].get("status")) for e in d.call("events_since", since=seq)["events"]
             if e["data"].get("task") == behind][:2]
    assert moved == [("kanban.unlinked", None), ("kanban.status", "ready")] and not _show(d, behind)["parents"]
    assert d.ctl("kanban", "unlink", task, behind).returncode == 5  # no such link any more


def test_spawn_failures_block_with_the_reason_and_refusals_have_exit_codes(d, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    task = _json_lines(d.ctl("kanban", "create", "nowhere", "--assignee", "scribe", "--triage", "--cwd", str(gone),
                             "--json"))[0]["id"]
    assert _show(d, task)["status"] == "triage"
    shutil.rmtree(gone)
    assert d.ctl("kanban", "unblock", task).returncode == 0
    wait_for(lambda: _show(d, task)["status"] == "blocked", timeout=60, what="blocked after failed spawns")
    reason = _show(d, task)["block_reason"]
    assert "could not start worker" in reason and "does not exist" in reason
    kinds = [e["type"] for e in d.call("events_since", since=0)["events"]]
    assert kinds.count("kanban.spawn_failed") == 2

    # a profile with a task assigned cannot be deleted; removed by hand, the spawn fails with the reason
    d.ctl("profile", "create", "temp", "--description", "short-lived", "--provider", "scripted")
    orphan = _json_lines(d.ctl("kanban", "create", "orphan", "--assignee", "temp", "--triage", "--json"))[0]["id"]
    refused = d.ctl("profile", "delete", "temp")
    assert refused.returncode == 6 and f"1 unfinished task(s) ({orphan})" in refused.stderr
    shutil.rmtree(d.home / "profiles" / "temp")
    d.ctl("kanban", "unblock", orphan)
    wait_for(lambda: _show(d, orphan)["status"] == "blocked", timeout=60, what="orphan blocked")
    assert "no profile 'temp'" in _show(d, orphan)["block_reason"]

    missing = d.ctl("kanban", "create", "x", "--assignee", "ghost", "--json")
    assert missing.returncode == 5 and "no profile 'ghost'" in json.loads(missing.stdout)["error"]["message"]
    assert d.ctl("kanban", "show", "kb_99").returncode == 5
    assert d.ctl("kanban", "unblock", task).returncode == 0  # blocked → back in the queue
    assert d.ctl("kanban", "create", "x", "--assignee", "scribe", "--parent", "kb_99").returncode == 5
    a = _json_lines(d.ctl("kanban", "create", "first", "--assignee", "scribe", "--triage", "--json"))[0]["id"]
    b = _json_lines(d.ctl("kanban", "create", "second", "--assignee", "scribe", "--triage", "--json"))[0]["id"]
    assert d.ctl("kanban", "link", a, b).returncode == 0
    assert d.ctl("kanban", "link", b, a).returncode == 2  # a cycle
    assert _show(d, b)["parents"] == [a]
    # b, not a: b waits (todo) for its parent a in triage, so no worker can take it and block it
    # again before the second unblock (a warm worker, failing at once, would: a race)
    assert d.ctl("kanban", "unblock", b, "--json").returncode == 0
    assert d.ctl("kanban", "unblock", b).returncode == 6  # not blocked any more



def test_can_move_sees_through_chains_of_todo_tasks():
    def t(id_, status, *parents):
        return {"id": id_, "status": status, "parents": list(parents)}
    board = [t("a", "done"), t("b", "running", "a"), t("c", "todo", "b"), t("d", "todo", "c"),
             t("x", "blocked"), t("y", "todo", "x"), t("z", "todo", "y", "a"), t("p", "triage"), t("q", "todo", "gone")]
    assert can_move(board) == ["b", "c", "d"]
    assert can_move([t("a", "done"), t("b", "todo", "a")]) == ["b"]  # about to become ready
    assert can_move([t("a", "done"), t("x", "blocked"), t("y", "review")]) == []


def test_kanban_list_keeps_its_columns_apart(make_daemon):
    d = make_daemon()
    for name in ("a-rather-long-profile-name", "x"):
        assert d.ctl("profile", "create", name, "--description", "works").returncode == 0
    d.ctl("pause")  # the dispatcher claims nothing: the tasks stay ready
    for title, who, priority in (("first task", "x", "1"), ("second", "a-rather-long-profile-name", "10")):
        assert d.ctl("kanban", "create", title, "--assignee", who, "--priority", priority).returncode == 0
    lines = d.ctl("kanban", "list").stdout.splitlines()
    assert len(lines) == 2 and len({line.index(title) for line, title in zip(lines, ("second", "first task"))}) == 1
    for line in lines:
        assert "a-rather-long-profile-name  p" in line or "x  " in line
