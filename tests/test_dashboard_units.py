"""The dashboard's parts without a daemon or a browser: the job tree, the live feed's topics, the
conversation, the histogram, the token guard (cookie flags, origin, no CORS)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from dashboard import charts, conversation
from dashboard.auth import COOKIE, Guard, csrf_token, load_token
from dashboard.index import FOLD_AFTER, Index


def rec(job: str, status: str = "completed", parent: str | None = None, session: str | None = None,
        second: int = 0, kind: str = "delegation") -> dict:
    return {"id": job, "kind": kind, "status": status, "parent": parent, "session": session, "goal": f"goal of {job}",
            "dispatched_at": f"2026-12-01T00:{second // 60:02d}:{second % 60:02d}Z", "trace": [{"name": "terminal"}]}


def test_the_tree_is_newest_first_with_sessions_children_and_folds():
    index = Index()
    index.add([rec("bg_old", second=1), rec("batch_b", "running", second=2, kind="batch"),
               rec("turn_1", session="main", second=3, kind="session_turn"), rec("deleg_new", second=9)])
    index.add([rec(f"item_{i:02d}", parent="batch_b", second=10 + i, kind="batch_item") for i in range(FOLD_AFTER + 5)])
    index.add([rec("item_live", "running", parent="batch_b", second=5, kind="batch_item")])
    rows, total = index.rows()
    ids = [(r.depth, r.rec["id"], r.holder) for r in rows]
    assert total == 4 and ids[0] == (0, "deleg_new", None) and ids[1] == (0, "main", "holder")
    assert rows[1].rec["kind"] == "session"
    assert ids[2] == (1, "turn_1", None) and ids[3] == (0, "batch_b", None)
    assert ids[4] == (1, "item_live", None), "a live child first"
    assert ids[5] == (1, f"item_{FOLD_AFTER + 4:02d}", None), "then the newest finished ones"
    fold = [r for r in rows if r.holder == "fold"]
    assert len(fold) == 1 and "5 more finished (5 completed)" in fold[0].rec["goal"]
    assert ids[-1] == (0, "bg_old", None)
    assert "trace" not in index.get("deleg_new"), "the trace stays with the daemon"
    index.add([rec("kanban_w1", "running", parent="kb_7", second=99, kind="kanban_worker")])
    rows, _ = index.rows()
    assert (rows[0].rec["id"], rows[0].rec["kind"], rows[1].rec["id"], rows[1].depth) == \
        ("kb_7", "Kanban task", "kanban_w1", 1), "a Kanban task's workers under it"
    flat, found = index.rows(kind="batch_item", state="live")
    assert found == 1 and flat[0].rec["id"] == "item_live"
    assert [r.rec["id"] for r in index.rows(text="GOAL OF BG")[0]] == ["bg_old"]


def test_the_counts_at_the_top_are_those_of_the_tree_and_its_filters():
    index = Index()
    assert index.tally() == {"top": 0, "live": 0}
    index.add([rec("loose", "running", second=1), rec("batch_b", "running", second=2, kind="batch"),
               rec("item_1", parent="batch_b", second=3, kind="batch_item"),
               rec("item_2", "running", parent="batch_b", second=4, kind="batch_item"),
               rec("turn_1", session="main", second=5, kind="session_turn"),
               rec("turn_2", "queued", session="main", second=6, kind="session_turn"),
               rec("worker", "failed", parent="kb_3", second=7, kind="kanban_worker")])
    # loose, batch_b (its items under it), the session main, the Kanban task kb_3: as the rows page through
    assert index.tally() == {"top": index.rows()[1], "live": 4} == {"top": 4, "live": 4}
    assert index.tally(kind="batch_item") == {"top": index.rows(kind="batch_item")[1], "live": 1} == {"top": 2, "live": 1}
    assert index.tally(state="ended") == {"top": 3, "live": 0}
    assert index.tally(text="TURN_") == {"top": 2, "live": 1}


def test_events_update_the_index_and_name_their_topics():
    index = Index()
    index.add([rec("batch_b", "running", kind="batch")])
    topics, rows = index.apply({"seq": 5, "type": "job.queued", "job": "item_1",
                                "data": {"job": rec("item_1", "queued", parent="batch_b", kind="batch_item")}})
    assert {"jobs", "job:item_1", "job:batch_b", "batch:batch_b"} <= topics and rows == {"item_1"}
    topics, _ = index.apply({"seq": 6, "type": "job.progress", "job": "item_1",
                             "data": {"api_calls": 3, "cost_usd": 0.25, "tool": "terminal"}})
    assert index.get("item_1")["api_calls"] == 3 and "bill" in topics
    topics, _ = index.apply({"seq": 7, "type": "approval.requested", "job": "item_1",
                             "data": {"id": "apr_1", "job": "item_1", "tool": "terminal"}})
    assert "approvals" in topics and index.waiting("item_1")[0]["id"] == "apr_1"
    index.apply({"seq": 8, "type": "approval.answered", "job": "item_1", "data": {"id": "apr_1"}})
    assert not index.approvals and index.last_seq == 8
    assert "kanban" in index.apply({"seq": 9, "type": "kanban.created", "data": {}})[0]


def test_a_conversation_from_the_journal_pairs_calls_and_results():
    entries = [{"t": "message", "message": {"role": "user", "content": [{"type": "text", "text": "go"}]}},
               {"t": "message", "message": {"role": "assistant", "content": [
                   {"type": "thinking", "thinking": "hmm"},
                   {"type": "tool_use", "id": "t1", "name": "terminal", "input": {"command": "ls"}}]}},
               {"t": "tool_started", "id": "t1", "name": "terminal"},
               {"t": "tool_result", "result": {"type": "tool_result", "tool_use_id": "t1", "content": "x" * 5000},
                "trace": {"name": "terminal", "ok": True}},
               {"t": "tool_started", "id": "t2", "name": "read_file"}]
    turns = conversation.from_journal(entries)
    kinds = [[b["kind"] for b in t["blocks"]] for t in turns]
    assert kinds == [["text"], ["thinking", "call"], ["result"], ["note"]], "the finished call's start is dropped"
    assert turns[2]["blocks"][0]["fold"] and turns[2]["blocks"][0]["name"] == "terminal"
    assert '"command": "ls"' in turns[1]["blocks"][1]["text"] and "running read_file" in turns[3]["blocks"][0]["text"]


def test_histogram_bins_rewards_in_zero_to_one():
    hist = charts.histogram([0.0, 0.05, 0.5, 1.0, 1.0])
    assert [b["count"] for b in hist["bins"]] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2] and hist["total"] == 5
    assert charts.histogram([])["bins"] == []


def test_the_guard_sets_a_strict_cookie_checks_origins_and_sends_no_cors(tmp_path):
    token = load_token(tmp_path)
    assert (tmp_path / "dashboard.token").stat().st_mode & 0o777 == 0o600 and load_token(tmp_path) == token

    async def hello(request):
        return PlainTextResponse("hello")

    app = Guard(Starlette(routes=[Route("/", hello, methods=["GET", "POST"]), Route("/metrics", hello)]), token)
    client = TestClient(app, base_url="http://127.0.0.1:8770")
    assert client.get("/").status_code == 401
    signed = client.get(f"/?token={token}&x=1", follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/?x=1"
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={token};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = client.get("/", headers={"Origin": "http://evil.example"})  # the cookie: reading is fine
    assert page.status_code == 200 and not any(h.lower().startswith("access-control") for h in page.headers)
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert client.post("/", headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.post("/", headers={"Origin": "http://127.0.0.1:8770"}).status_code == 200
    assert csrf_token(token) != token and token not in csrf_token(token)
    public = TestClient(Guard(app.app, token, metrics_public=True), base_url="http://127.0.0.1:8770")
    assert public.get("/metrics").status_code == 200 and public.get("/").status_code == 401
