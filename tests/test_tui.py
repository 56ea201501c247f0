"""``hermesctl top``: the board it shows (unit), and the TUI driven headless against a real daemon."""

from __future__ import annotations

import asyncio
import itertools
import time

from client.top_board import Board, snapshot_text
from tests.harness import wait_for

SLEEPY = [{"text": "started", "sleep": 30}]


_clock = itertools.count()


def rec(job_id: str, status: str = "running", **fields) -> dict:
    """A minimal job record, dispatched after the previous one."""
    return {"id": job_id, "kind": fields.pop("kind", "delegation"), "status": status, "goal": f"goal of {job_id}",
            "dispatched_at": f"2026-01-01T00:00:00.{next(_clock):06}Z", **fields}


def keys(nodes) -> list:
    """The tree as nested ``[key, [children…]]`` lists."""
    return [[n.key, keys(n.children)] if n.children else n.key for n in nodes]


def test_tree_sessions_delegations_children_and_groups():
    board = Board()
    board.add_jobs([rec("turn_1", kind="session_turn", session="s1"),
                    rec("bg_1", kind="background", session="s1", parent="turn_1"),
                    rec("deleg_2", session="s1", parent="bg_1"),
                    rec("deleg_3", parent="group_9"), rec("deleg_4", parent="group_9"),
                    rec("bg_5", "completed", kind="background"),
                    rec("deleg_6", parent="turn_gone", session="s2")])
    assert keys(board.tree()) == [  # live first, each in dispatch order
        ["session:s1", [["turn_1", [["bg_1", ["deleg_2"]]]]]],
        ["parent:group_9", ["deleg_3", "deleg_4"]],
        ["session:s2", [["parent:turn_gone", ["deleg_6"]]]],
        "bg_5",
    ]
    assert board.missing_parents() == ["turn_gone"]
    text = snapshot_text(board)
    assert "session s1" in text and "      bg_1  running  -  goal of bg_1  · 0 calls  background" in text


def test_events_update_jobs_progress_and_unknown_types():
    board = Board()
    board.apply({"seq": 1, "type": "job.queued", "job": "bg_1", "data": {"job": rec("bg_1", "queued")}})
    board.apply({"seq": 2, "type": "job.state", "job": "bg_1",
                 "data": {"status": "completed", "previous": "running", "job": rec("bg_1", "completed")}})
    board.apply({"seq": 3, "type": "kanban.something_new", "job": None, "data": {"x": 1}})
    board.apply({"seq": 4, "type": "batch.progress", "job": "batch_n", "data": {"done": 3, "failed": 1, "total": 10}})
    assert board.jobs["bg_1"]["status"] == "completed" and board.last_seq == 4
    assert board.progress["batch_n"]["done"] == 3 and len(board.events) == 4


def test_running_jobs_show_calls_elapsed_and_last_activity():
    board = Board()
    board.add_jobs([rec("bg_1", started_at="2026-01-01T00:00:00.000Z")])
    board.apply({"seq": 1, "type": "job.progress", "job": "bg_1", "time": "2026-01-01T00:01:30.000Z",
                 "data": {"turn": 3, "tool": "terminal", "api_calls": 3}})
    now = 1767225700.0  # 2026-01-01T00:01:40Z
    node = board.tree()[0]
    from client.top_board import job_label

    assert job_label(board.jobs["bg_1"], now) == "bg_1  running  1m40s  goal of bg_1  · 3 calls  [turn 3 terminal 10s ago]  delegation"
    assert node.label.startswith("bg_1  running  ") and "3 calls  [turn 3 terminal" in node.label
    board.add_jobs([{**board.jobs["bg_1"], "status": "completed", "duration_seconds": 101.5}])
    assert job_label(board.jobs["bg_1"], now) == "bg_1  completed  101.5s  goal of bg_1  · 3 calls  delegation"


def test_a_running_jobs_cost_follows_its_progress_as_ps_shows_it():
    board = Board()
    board.add_jobs([rec("bg_1", tokens={"input": 0, "output": 0}, cost_usd=0.0, cost_unknown=False)])
    from client.top_board import job_label

    assert "· 0 calls  -" in job_label(board.jobs["bg_1"])
    board.apply({"seq": 1, "type": "job.progress", "job": "bg_1", "data": {
        "api_calls": 1, "tokens": {"input": 120, "output": 9}, "cost_usd": 0.0005, "cost_unknown": False}})
    assert "· 1 call  $0.0005" in job_label(board.jobs["bg_1"])


def test_finished_jobs_come_newest_first_below_the_live_ones():
    board = Board()
    board.add_jobs([rec("old", "completed", completed_at="2026-01-01T00:00:01.000Z"), rec("live"),
                    rec("new", "failed", completed_at="2026-01-01T00:00:09.000Z"),
                    rec("mid", "cancelled", completed_at="2026-01-01T00:00:05.000Z"), rec("queued", "queued"),
                    rec("turn_1", "completed", kind="session_turn", session="s1", completed_at="2026-01-01T00:00:07.000Z")])
    assert keys(board.tree()) == ["live", "queued", "new", ["session:s1", ["turn_1"]], "mid", "old"]


def test_a_narrow_row_gives_up_the_goal_before_its_calls_and_cost():
    from client.top_board import job_label

    job = rec("bg_1", goal="refactor the billing module " * 8, started_at="2026-01-01T00:00:00.000Z", api_calls=7,
              tokens={"input": 900, "output": 80}, cost_usd=0.0123, cost_unknown=False)
    now = 1767225614.0  # 14 s in
    assert "refactor the billing module refactor the billing" in job_label(job, now)  # 50 characters of it
    for width in (78, 60, 52, 44):
        row = job_label(job, now, width)
        assert row.startswith("bg_1  running  14s  ") and row.index("· 7 calls  $0.0123") + 18 <= width, (width, row)
    assert job_label(job, now, 52).startswith("bg_1  running  14s  refactor th…")
    assert job_label(job, now, 36).startswith("bg_1  running  14s  · 7 calls  $0.0123"), "no room: no goal at all"
    board = Board()
    board.add_jobs([rec("batch_n", kind="batch", goal=job["goal"]),
                    {**job, "id": "item_1", "kind": "batch_item", "parent": "batch_n"}])
    (batch,) = board.tree(width=60)
    assert len(batch.label.split("· 0 calls")[0]) <= 60 - 2 and "· 7 calls  $0.0123" in batch.children[0].label[:60 - 4]


def test_the_caps_panel_says_first_that_an_endpoint_is_paused_and_how_many_wait():
    """At 80 columns the caps panel shows about 36 cells of a line: the governor's state comes
    first, before the endpoint's long name (it showed ``provider anthropic http://…`` and was cut)."""
    board = Board()
    endpoint = "anthropic http://127.0.0.1:36299 key e9cf91f9"
    board.status = {"caps": {}, "governor": [
        {"endpoint": endpoint, "in_flight": 0, "waiting": ["a", "b", "c"], "paused_seconds": 0.7,
         "reason": "the provider says no requests remain until its bucket refills"},
        {"endpoint": "openai-compat http://x key 1", "in_flight": 2, "waiting": []}]}
    assert board.caps() == [f"PAUSED 0.7s, 3 waiting · {endpoint}: the provider says no requests remain until its "
                            "bucket refills", "2 in flight · openai-compat http://x key 1"]


def test_batch_progress_caps_and_folding():
    board = Board()
    board.add_jobs([rec("batch_n", kind="batch")])
    items = [rec(f"item_{i:03}", "completed" if i < 40 else "running", kind="batch_item", parent="batch_n")
             for i in range(45)]
    board.add_jobs(items)
    assert board.batches() == ["batch_n  running  40 done, 0 failed"]
    board.apply({"seq": 9, "type": "job.progress", "job": "batch_n",
                 "data": {"done": 40, "failed": 2, "discarded": 1, "total": 100, "processed": 43,
                          "rate_per_minute": 12.5, "eta_seconds": 273.6}})
    assert board.batches() == ["batch_n  running  ███████░░░░░░░░░ 43/100 40 done, 2 failed, 1 discarded, "
                               "12.5/min, ETA 274s"]
    children = board.tree()[0].children
    assert [c.status for c in children[:5]] == ["running"] * 5  # running items before finished ones
    assert children[-1].label == "… 20 more finished (20 completed)" and len(children) == 5 + 20 + 1
    board.status = {"caps": {"async": {"used": 1, "limit": 4}, "global": {"used": 0, "limit": None}}}
    assert board.caps() == ["async            ████░░░░░░░░░░ 1/4", "global           0/-"]


# -- the TUI, headless, against a real daemon -----------------------------------------------------


async def until(pilot, cond, what: str, timeout: float = 20.0):
    """Let the app run until ``cond()`` is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.05)
    return cond()


def status_of(app, job: str) -> str | None:
    """The status the TUI shows for ``job`` (None until its line appears)."""
    node = app.node_for(job)
    return None if node is None else app.board.jobs[job]["status"] if str(node.label).startswith(job) else None


def log_text(app) -> str:
    """What the log panel shows."""
    return "\n".join(strip.text for strip in app.log_panel.lines)


def test_top_follows_a_job_and_cancels_from_the_keyboard(daemon):
    from client.tui import TopApp

    async def scenario():
        app = TopApp(runtime_dir=daemon.runtime)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.connected and app.board.status, "the first status")
            quick = daemon.delegate("quick one", background=True, script=[{"text": "done", "sleep": 0.3}])["id"]
            await until(pilot, lambda: status_of(app, quick), "the job to appear")
            await until(pilot, lambda: status_of(app, quick) == "completed", "the job to finish")
            assert "completed" in str(app.node_for(quick).label)

            long = daemon.delegate("long one", background=True, script=SLEEPY)["id"]
            await until(pilot, lambda: status_of(app, long) == "running", "the long job running")
            await until(pilot, lambda: any("1/3" in c for c in app.board.caps()), "the async cap 1/3")
            for _ in range(10):  # move the cursor with the keyboard onto the long job (live ones come first)
                if app.selected_job() == long:
                    break
                await pilot.press("up" if app.node_for(long).line < app.jobs_tree.cursor_line else "down")
            assert app.selected_job() == long

            await pilot.press("l")
            with open(daemon.home / "jobs" / long / "log", "a") as fh:
                fh.write("a line the child logged\n")
            await until(pilot, lambda: "a line the child logged" in log_text(app), "the log panel to show it")
            await pilot.press("c")  # asks first: n keeps it running
            await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmCancel", "the question")
            await pilot.press("n")
            await pilot.pause(0.5)
            assert daemon.call("job", id=long)["status"] == "running"
            await pilot.press("c")
            await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmCancel", "the question again")
            await pilot.press("y")
            await until(pilot, lambda: status_of(app, long) == "cancelled", "the job cancelled from the keyboard")
            assert daemon.call("job", id=long)["status"] == "cancelled"
            await until(pilot, lambda: any(e["type"] == "async_delegation" and e["job"] == long
                                           for e in app.board.events), "the completion notification")
            assert "cancelled" in snapshot_text(app.board)

    asyncio.run(scenario())


def test_ctrl_c_quits_top_as_q_does(daemon):
    from client.tui import TopApp

    async def scenario():
        app = TopApp(runtime_dir=daemon.runtime)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.connected, "the first status")
            await pilot.press("ctrl+c")
            await until(pilot, lambda: not app.is_running, "top to quit")

    asyncio.run(scenario())


def test_top_catches_up_after_a_daemon_restart(daemon):
    from client.tui import TopApp

    async def scenario():
        app = TopApp(runtime_dir=daemon.runtime)
        async with app.run_test(size=(160, 48)) as pilot:
            orphan = daemon.delegate("running at the crash", background=True, script=SLEEPY, resume=False)["id"]
            await until(pilot, lambda: status_of(app, orphan) == "running", "the job running")
            await until(pilot, lambda: app.connected, "the first status")  # events may come before it
            old_pid = daemon.proc.pid
            daemon.kill9()
            await until(pilot, lambda: not app.connected and "disconnected" in app.sub_title,
                        "the TUI to notice the daemon is gone")
            daemon.start()  # reconciles: the orphan is lost, published while the TUI was away
            await until(pilot, lambda: status_of(app, orphan) == "lost", "the missed transition to lost")
            after = daemon.delegate("after the restart", background=True, script=[{"text": "ok"}])["id"]
            await until(pilot, lambda: status_of(app, after) == "completed", "a new job after the restart")
            await until(pilot, lambda: app.board.status["pid"] != old_pid, "the new daemon's status")
            seqs = [e["seq"] for e in app.board.events]
            assert seqs == sorted(set(seqs)), "every event exactly once, in order"

    asyncio.run(scenario())
    wait_for(lambda: daemon.children() == [], what="no children left")


def test_board_of_a_real_batch_run(daemon):
    from client.top_board import load

    dataset = daemon.work / "prompts.jsonl"
    dataset.write_text("".join(f'{{"prompt": "say {i}"}}\n' for i in range(3)))
    batch = daemon.call("batch.run", run_name="tui", dataset_file=str(dataset), batch_size=2, num_workers=2)
    assert daemon.wait_job(batch["id"])["status"] == "completed"
    conn = daemon.conn()
    try:
        board = load(conn, Board())
    finally:
        conn.close()
    assert board.batches()[0].startswith(f"{batch['id']}  completed  ") and "3/3" in board.batches()[0]
    node = next(n for n in board.tree() if n.job == batch["id"])
    assert len(node.children) == 3 and all(c.status == "completed" for c in node.children)


def test_the_tui_shows_live_jobs_first_then_the_newest_finished_and_keeps_the_cursor(daemon):
    """The rows on screen follow :meth:`Board.tree`'s order as jobs finish and start (the tree's
    nodes were updated in place, so a row kept the place it was added at: a finished job stayed
    above the others, a new one came last), and the cursor stays on the job it was on."""
    from client.tui import TopApp

    def rows(app) -> list:
        return [(n.data or {}).get("key") for n in app.jobs_tree.root.children]

    async def scenario():
        app = TopApp(runtime_dir=daemon.runtime)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.connected and app.board.status, "the first status")
            quick = daemon.delegate("quick", background=True, script=[{"text": "done", "sleep": 0.3}])["id"]
            slow = daemon.delegate("slow", background=True, script=SLEEPY)["id"]
            await until(pilot, lambda: status_of(app, quick) == "completed", "the quick job to finish")
            await until(pilot, lambda: rows(app) == [slow, quick], "the live job above the finished one")
            app.jobs_tree.move_cursor(app.node_for(quick))
            third = daemon.delegate("third", background=True, script=SLEEPY)["id"]
            await until(pilot, lambda: rows(app) == [slow, third, quick], "live jobs first, in dispatch order")
            daemon.call("cancel", id=slow)
            await until(pilot, lambda: rows(app) == [third, slow, quick], "the last to finish first of the finished")
            assert app.selected_job() == quick, "the cursor stays on its job"
            daemon.call("cancel", id=third)
            await until(pilot, lambda: rows(app) == [third, slow, quick], "newest first")

    asyncio.run(scenario())
