"""The board's rules without a daemon: statuses and readiness, links and cycles,
who may touch what, atomic claims, failed attempts, events; and which kanban
tools an agent is offered by its role."""

from __future__ import annotations

import pytest

from child.tools import kanban as kanban_tools
from child.tools.registry import tools_for
from hermesd.kanban import board as kanban, profiles
from hermesd.events import EventLog
from hermesd.kanban import PERSON, Actor, Board
from hermesd.protocol import ProtocolError
from hermesd.store import CORE_MIGRATIONS, Store, schema


@pytest.fixture
def board(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    for name in ("coder", "researcher"):
        profiles.save(name, {"description": f"a {name}"})
    store = Store(tmp_path / "state.db", schema(CORE_MIGRATIONS, kanban.MIGRATIONS))
    published = []
    events = EventLog(store, published.append)
    kicks = []
    b = Board(store, events, kick=lambda: kicks.append(1))
    b.published, b.kicks = published, kicks
    yield b
    store.close()


def _types(b: Board) -> list[str]:
    return [r["type"] for r in b.store.all("SELECT type FROM events ORDER BY seq")]


def _worker(b: Board, task_id: str, job: str = "kbw_1") -> Actor:
    assert b.claim(task_id, job) is not None
    return Actor("coder (kbw)", job=job, task=task_id)


def test_readiness_follows_parents(board):
    a = board.create(PERSON, title="a", assignee="coder")
    b = board.create(PERSON, title="b", assignee="coder", parents=[a["id"]])
    c = board.create(PERSON, title="c", assignee="researcher", parents=[a["id"], b["id"]], priority=3)
    assert (a["id"], a["status"], b["status"], c["status"]) == ("kb_1", "ready", "todo", "todo")
    assert board.record(board.require(a["id"]))["children"] == [b["id"], c["id"]]
    done = board.complete(_worker(board, a["id"]), "answer a", ["a.md"])
    assert done["status"] == "done" and done["result"] == "answer a" and done["claimed_by"] is None
    assert board.require(b["id"])["status"] == "ready" and board.require(c["id"])["status"] == "todo"
    board.complete(_worker(board, b["id"], "kbw_2"), "answer b")
    assert board.require(c["id"])["status"] == "ready"
    assert [t["id"] for t in board.list(status="ready")] == [c["id"]]
    assert "kanban.created" in _types(board) and "kanban.status" in _types(board)
    assert len(board.published) == len(_types(board))  # every recorded event was published
    assert board.kicks


def test_create_validates_and_names_the_field(board):
    with pytest.raises(ProtocolError, match="no profile 'ghost'.*coder, researcher") as err:
        board.create(PERSON, title="x", assignee="ghost")
    assert err.value.code == "not_found"
    for kwargs, field in (({"title": ""}, "title"), ({"priority": "high"}, "priority"),
                          ({"board": "../etc"}, "board"), ({"parents": "kb_1"}, "parents"),
                          ({"cwd": "relative/dir"}, "cwd"), ({"title": "x" * 600}, "title")):
        with pytest.raises(ProtocolError) as err:
            board.create(PERSON, **{"title": "t", "assignee": "coder", **kwargs})
        assert err.value.details["field"] == field
    with pytest.raises(ProtocolError, match="no task 'kb_9'"):
        board.create(PERSON, title="t", assignee="coder", parents=["kb_9"])
    other = board.create(PERSON, title="elsewhere", assignee="coder", board="ops")
    with pytest.raises(ProtocolError, match="on board 'ops'"):
        board.create(PERSON, title="t", assignee="coder", parents=[other["id"]])
    assert board.boards() == ["ops"]


def test_links_refuse_cycles_and_send_ready_tasks_back(board):
    a, b, c = (board.create(PERSON, title=t, assignee="coder")["id"] for t in "abc")
    assert board.link(PERSON, a, b)["status"] == "todo"
    board.link(PERSON, b, c)
    for parent, child in ((c, a), (a, a)):
        with pytest.raises(ProtocolError, match="cycle"):
            board.link(PERSON, parent, child)
    board.claim(a, "kbw_1")
    with pytest.raises(ProtocolError, match="running") as err:
        board.link(PERSON, c, a)
    assert err.value.code == "invalid_state"


def test_a_worker_touches_only_its_own_task(board):
    mine = board.create(PERSON, title="mine", assignee="coder")["id"]
    other = board.create(PERSON, title="other", assignee="coder")["id"]
    worker = _worker(board, mine)
    for call in (lambda: board.complete(worker, "x", task_id=other), lambda: board.block(worker, "x", task_id=other),
                 lambda: board.comment(worker, other, "hi")):
        with pytest.raises(ProtocolError, match=f"task {other} is not yours"):
            call()
    for call in (lambda: board.create(worker, title="t", assignee="coder"), lambda: board.link(worker, mine, other),
                 lambda: board.unblock(worker, other), lambda: board.archive(worker, other)):
        with pytest.raises(ProtocolError, match="worker cannot"):
            call()
    assert board.comment(worker, mine, "working on it")["author"] == "coder (kbw)"
    assert board.my_task(worker)["comments"][0]["text"] == "working on it"
    assert board.heartbeat(worker)["heartbeat_at"]
    with pytest.raises(ProtocolError, match="only the Kanban worker"):
        board.complete(PERSON, "x", task_id=mine)
    # a worker whose claim was taken back cannot complete any more
    board.release(board.require(mine), job=worker.job, reason="silent", failure=True, max_failures=3)
    with pytest.raises(ProtocolError, match="no longer claimed") as err:
        board.complete(worker, "late")
    assert err.value.code == "invalid_state"
    assert board.require(other)["status"] == "ready" and board.require(other)["result"] is None


def test_claims_are_atomic_and_failed_attempts_block(board):
    task = board.create(PERSON, title="flaky", assignee="coder")["id"]
    assert board.claim(task, "kbw_1")["claimed_by"] == "kbw_1"
    assert board.claim(task, "kbw_2") is None  # already running
    for attempt in (1, 2):
        row = board.release(board.require(task), job=f"kbw_{attempt}", reason=f"crash {attempt}", failure=True,
                            max_failures=3)
        assert row["status"] == "ready" and row["failures"] == attempt
        board.claim(task, f"kbw_{attempt + 1}")
    row = board.release(board.require(task), job="kbw_3", reason="crash 3", failure=True, max_failures=3)
    assert row["status"] == "blocked" and row["attempts"] == 3
    assert "blocked after 3 failed attempt(s)" in row["block_reason"] and "crash 3" in row["block_reason"]
    assert _types(board).count("kanban.reclaimed") == 3
    # unblocking resets the count and leaves a note for the next worker
    row = board.unblock(PERSON, task, "the API key is in place now")
    assert row["status"] == "ready" and row["failures"] == 0 and row["block_reason"] is None
    assert board.comments(task)[0]["text"] == "the API key is in place now"
    with pytest.raises(ProtocolError, match="not blocked"):
        board.unblock(PERSON, task)
    # a release without failure (hermesd stopped) never counts
    board.claim(task, "kbw_4")
    assert board.release(board.require(task), job="kbw_4", reason="stopped", failure=False,
                         max_failures=1)["status"] == "ready"


def test_triage_archive_and_transitions(board):
    parked = board.create(PERSON, title="later", assignee="coder", triage=True)
    assert parked["status"] == "triage"
    assert board.unblock(PERSON, parked["id"])["status"] == "ready"
    running = board.create(PERSON, title="busy", assignee="coder")["id"]
    board.claim(running, "kbw_9")
    record, worker = board.archive(PERSON, running)
    assert record["status"] == "archived" and worker == "kbw_9"
    assert board.list() == [board.require(parked["id"])]
    assert [t["id"] for t in board.list(archived=True)] == [parked["id"], running]
    with pytest.raises(ProtocolError, match="archived and cannot become ready") as err:
        board.release(board.require(running), job=None, reason="x", failure=False, max_failures=3)
    assert err.value.code == "invalid_state"
    assert set(kanban.TRANSITIONS) == set(kanban.STATUSES)


def test_tools_offered_by_role():
    orchestrator = {t.name for t in tools_for(["kanban"])}
    worker = {t.name for t in tools_for(["kanban", "file"], kanban.WORKER_ROLE)}
    assert orchestrator == set(kanban_tools.ORCHESTRATOR_TOOLS)
    assert worker - {"read_file", "write_file", "patch_file", "list_files"} == set(kanban_tools.WORKER_TOOLS)
    assert kanban_tools.WORKER_ROLE == kanban.WORKER_ROLE
    assert not {t.name for t in tools_for(["all"], kanban.WORKER_ROLE)} & orchestrator


def test_listings_cut_long_texts(board):
    task = board.create(PERSON, title="long", assignee="coder", body="x" * 800)
    short = board.record(board.require(task["id"]), cut=500)
    assert short["body"].startswith("x" * 500) and "300 more characters: see kanban.show" in short["body"]
    assert board.record(board.require(task["id"]), full=True)["body"] == "x" * 800
