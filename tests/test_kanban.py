"""The Kanban board end to end, with real daemons, real worker processes and the
fake Messages API: an orchestrator session plans linked tasks for two profiles,
the dispatcher runs them in dependency order, workers are held to their own task,
a killed worker and a silent worker lose their claim and the task completes on
retry, and the kanban tools appear only by the literal toolset name."""

from __future__ import annotations

import json
import os
import signal
import threading

import psutil
import pytest

from child.channel import Channel
from hermesd.protocol import ProtocolError
from tests.fakes.anthropic_server import FakeAnthropic, Message, last_user_text, text_block, tool_use_block
from tests.harness import wait_for

ORCHESTRATOR_TOOLS = {"kanban_create", "kanban_link", "kanban_list", "kanban_show", "kanban_comment",
                      "kanban_unblock"}
WORKER_TOOLS = {"kanban_my_task", "kanban_complete", "kanban_block", "kanban_comment", "kanban_heartbeat"}


def _system(request) -> str:
    system = request.body.get("system") or ""
    return system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)


def _tools(request) -> set[str]:
    return {t["name"] for t in request.body.get("tools") or []}


def _first_user_text(request) -> str:
    content = request.body["messages"][0]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content
                                                              if b.get("type") == "text")


def _results(request) -> list[tuple[bool, str]]:
    """``(is_error, text)`` of every tool result since the last plain user message."""
    out = []
    for message in request.body["messages"]:
        content = message["content"]
        if message["role"] != "user" or isinstance(content, str):
            if message["role"] == "user":
                out = []
            continue
        blocks = [b for b in content if b.get("type") == "tool_result"]
        if not blocks:
            out = []
        for block in blocks:
            body = block.get("content")
            text = body if isinstance(body, str) else " ".join(b.get("text", "") for b in body or [])
            out.append((bool(block.get("is_error")), text))
    return out


def _call(name: str, **args) -> Message:
    return Message([tool_use_block(name, args)], stop_reason="tool_use")


class Brain:
    """The fake model: an orchestrator that plans three linked tasks, and workers that
    do theirs (one also tries another task's comments; ``hang`` tasks hang on their
    first attempt until :attr:`release` is set).  Workers answer only once :attr:`planned`
    is set: a test that clears it holds them until the orchestrator's plan is whole, so
    that no task ends while its siblings are still being created and linked."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen: list[dict] = []
        self.release = threading.Event()
        self.planned = threading.Event()
        self.planned.set()
        self.hung: set[str] = set()

    def __call__(self, request):
        with self.lock:
            self.seen.append({"system": _system(request), "tools": _tools(request),
                              "first": _first_user_text(request), "results": _results(request)})
        if "Kanban worker" in _system(request):
            self.planned.wait(120)
            return self.worker(request)
        return self.orchestrator(request)

    def orchestrator(self, request):
        results = _results(request)
        if not last_user_text(request).startswith("plan") and not results:
            return Message([text_block("tools: " + ",".join(sorted(_tools(request))))])
        ids = [json.loads(text)["id"] for err, text in results[1:] if not err]
        step = len(results)
        if step == 0:
            return _call("kanban_list")
        if step == 1:
            return _call("kanban_create", title="research the API", assignee="researcher",
                         body="Find out how the API paginates.")
        if step == 2:
            return _call("kanban_create", title="implement the client", assignee="coder", parents=[ids[0]],
                         priority=5)
        if step == 3:
            return _call("kanban_create", title="write the report", assignee="researcher", parents=[ids[0]])
        if step == 4:
            return _call("kanban_link", parent=ids[1], child=ids[2])
        self.planned.set()
        return Message([text_block("planned: " + " ".join(ids))])

    def worker(self, request):
        first = _first_user_text(request)
        task = first.split()[1].rstrip(":")
        results = _results(request)
        if not results and "hang" in first:
            with self.lock:
                hang = task not in self.hung
                self.hung.add(task)
            if hang:
                self.release.wait(120)
        if not results:
            return _call("kanban_my_task")
        if "implement" in first and len(results) == 1:
            other = json.loads(results[0][1])["parent_results"][0]["id"]
            return _call("kanban_comment", id=other, text="let me touch your task")
        if not any('"status": "done"' in text for _, text in results):
            return _call("kanban_complete", result=f"result of {task}", artifacts=[f"{task}.md"])
        return Message([text_block(f"finished {task}")])


@pytest.fixture
def brain():
    brain = Brain()
    yield brain
    brain.release.set()
    brain.planned.set()


@pytest.fixture
def api(brain):
    with FakeAnthropic() as server:
        server.default = brain
        yield server


def _daemon(make_daemon, api, **config):
    cfg = {"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal", "file"],
           "kanban": {"dispatch_interval_seconds": 0.2}, **config}
    d = make_daemon(cfg, env={"ANTHROPIC_API_KEY": "test-key"})
    for name, text in (("researcher", "Reads sources and writes research notes"),
                       ("coder", "Implements features and writes tests")):
        d.call("profile.create", name=name, description=text, toolsets=["file"])
    return d


def _task(d, task_id):
    return d.call("kanban.show", id=task_id)


def _events(d, prefix="kanban."):
    return [e for e in d.call("events_since", since=0, limit=10000)["events"] if e["type"].startswith(prefix)]


def test_orchestrator_plans_and_workers_run_in_dependency_order(make_daemon, api, brain):
    # the first task's worker waits for the whole plan: on a loaded machine it once finished before
    # the orchestrator linked the last task, which went ready, todo, ready (a legal order, not the one below)
    brain.planned.clear()
    d = _daemon(make_daemon, api)
    turn = d.call("session.send", session="boss", text="plan the release", toolsets=["kanban"],
                  cwd=str(d.work))["turn"]
    assert d.wait_job(turn["id"], timeout=120)["status"] == "completed"
    tasks = d.call("kanban.list")["tasks"]
    assert len(tasks) == 3
    by_title = {t["title"]: t for t in tasks}
    a, b, c = (by_title[t]["id"] for t in ("research the API", "implement the client", "write the report"))
    assert by_title["write the report"]["parents"] == [a, b]
    assert by_title["implement the client"]["created_by"] == "session boss"

    wait_for(lambda: all(_task(d, t)["status"] == "done" for t in (a, b, c)), timeout=180,
             what="three tasks done")
    ta, tb, tc = (_task(d, t) for t in (a, b, c))
    for task in (ta, tb, tc):
        assert task["result"] == f"result of {task['id']}" and task["artifacts"] == [f"{task['id']}.md"]
        assert task["attempts"] == 1 and task["failures"] == 0
    # dependency order: a before b and c; b before c
    assert ta["completed_at"] <= tb["claimed_at"] and ta["completed_at"] <= tc["claimed_at"]
    assert tb["completed_at"] <= tc["claimed_at"]
    # three separate worker processes, each a kanban_worker job with its profile
    workers = [d.wait_job(t["worker"], timeout=60) for t in (ta, tb, tc)]
    assert all(w["kind"] == "kanban_worker" and w["status"] == "completed" for w in workers)
    assert len({w["pid"] for w in workers}) == 3 and all(w["pid"] for w in workers)
    assert [w["role"] for w in workers] == ["kanban_worker"] * 3
    assert all("kanban" in w["toolsets"] and "terminal" not in w["toolsets"] for w in workers)

    orchestrator = [s for s in brain.seen if "Kanban worker" not in s["system"]]
    worker = [s for s in brain.seen if "Kanban worker" in s["system"]]
    # the orchestrator saw the profiles (routing by description) and only orchestrator tools
    listing = json.loads(orchestrator[1]["results"][0][1])
    assert {p["name"]: p["description"] for p in listing["profiles"]}["coder"].startswith("Implements")
    assert all(s["tools"] >= ORCHESTRATOR_TOOLS and not s["tools"] & {"kanban_complete", "kanban_my_task"}
               for s in orchestrator)
    assert all(s["tools"] & {"kanban_create", "kanban_list", "kanban_link"} == set() and s["tools"] >= WORKER_TOOLS
               for s in worker)
    # the last task's worker was told the results of the tasks it waited for
    assert any(f"Result of {a}" in s["first"] and f"Result of {b}" in s["first"] for s in worker)
    # the coder tried to comment on another task and was refused
    refused = [text for s in worker for err, text in s["results"] if err and "not yours" in text]
    assert refused and a in refused[0]
    assert _task(d, a)["comments"] == []
    # events: created, claimed, status changes, in order for each task
    statuses = [(e["data"]["task"], e["data"]["status"]) for e in _events(d) if e["type"] == "kanban.status"]
    assert [s for t, s in statuses if t == c] == ["running", "done"] or \
        [s for t, s in statuses if t == c] == ["ready", "running", "done"]
    assert [s for t, s in statuses if t == a] == ["ready", "running", "done"]


def test_all_exposes_no_kanban_tool_and_kanban_does(make_daemon, api, brain):
    d = _daemon(make_daemon, api)
    for session, toolsets in (("everything", ["all"]), ("star", ["*"]), ("board", ["kanban"])):
        turn = d.call("session.send", session=session, text="which tools?", toolsets=toolsets)["turn"]
        record = d.wait_job(turn["id"], timeout=60)
        assert record["status"] == "completed"
        offered = set(record["summary"].removeprefix("tools: ").split(","))
        if toolsets == ["kanban"]:
            assert offered >= ORCHESTRATOR_TOOLS
        else:
            assert "terminal" in offered and not any(t.startswith("kanban_") for t in offered)
    # a job without the kanban toolset cannot reach the board either
    with pytest.raises(ProtocolError, match="unknown toolset"):
        d.call("session.send", session="bad", text="x", toolsets=["kanbans"])


def _live_worker(d, task_id):
    def running():
        task = _task(d, task_id)
        job = d.call("job", id=task["claimed_by"]) if task["claimed_by"] else None
        return job if job and job["status"] == "running" and job["pid"] else None

    return wait_for(running, timeout=90, what=f"a running worker for {task_id}")


def test_killed_worker_is_reclaimed_and_the_task_completes_on_retry(make_daemon, api, brain):
    d = _daemon(make_daemon, api)
    task = d.call("kanban.create", title="hang then work", assignee="coder")["id"]
    other = d.call("kanban.create", title="someone else's", assignee="researcher", triage=True)["id"]
    job = _live_worker(d, task)
    wait_for(lambda: task in brain.hung, timeout=60, what="the worker waiting for its model")
    # the worker's own credentials cannot touch another task or act as an orchestrator
    env = psutil.Process(job["pid"]).environ()
    channel = Channel(env["HERMES_CHILD_SOCKET"], job["id"], env["HERMES_CHILD_TOKEN"])
    try:
        for op, args, match in (("kanban.complete", {"id": other, "result": "mine now"}, "not yours"),
                                ("kanban.block", {"id": other, "reason": "no"}, "not yours"),
                                ("kanban.create", {"title": "more", "assignee": "coder"}, "not available"),
                                ("kanban.list", {}, "not available")):
            with pytest.raises(ProtocolError, match=match):
                channel.call("child.call", op=op, args=args, timeout=30)
        assert channel.call("child.call", op="kanban.my_task", args={}, timeout=30)["id"] == task
    finally:
        channel.close()
    assert _task(d, other)["status"] == "triage" and _task(d, other)["result"] is None

    os.kill(job["pid"], signal.SIGKILL)
    wait_for(lambda: _task(d, task)["status"] == "done", timeout=120, what="the task done on retry")
    final = _task(d, task)
    assert final["attempts"] == 2 and final["failures"] == 1 and final["worker"] != job["id"]
    assert d.call("job", id=job["id"])["status"] == "failed"
    reclaimed = [e for e in _events(d) if e["type"] == "kanban.reclaimed"]
    assert [e["data"]["worker"] for e in reclaimed] == [job["id"]]
    assert "without calling kanban_complete" in reclaimed[0]["data"]["reason"]


def test_silent_worker_loses_its_claim_after_the_ttl(make_daemon, api, brain):
    ttl = 15  # generous: under load a worker may take seconds between its hello and its first report
    d = _daemon(make_daemon, api, kanban={"heartbeat_ttl_seconds": ttl, "dispatch_interval_seconds": 0.2,
                                          "max_spawn_failures": 5})
    task = d.call("kanban.create", title="hang quietly", assignee="coder")["id"]
    job = _live_worker(d, task)
    wait_for(lambda: _task(d, task)["status"] == "done", timeout=180, what="the task done on retry")
    reclaimed = [e for e in _events(d) if e["type"] == "kanban.reclaimed"]
    assert reclaimed[0]["data"]["worker"] == job["id"] and "no sign of life" in reclaimed[0]["data"]["reason"]
    claimed = next(e for e in _events(d) if e["type"] == "kanban.claimed" and e["job"] == job["id"])
    from hermesd.clock import parse_iso

    assert (parse_iso(reclaimed[0]["time"]) - parse_iso(claimed["time"])).total_seconds() >= ttl
    # the silent worker's process was stopped, not left behind
    first = d.wait_job(job["id"], timeout=60)
    assert first["status"] in ("interrupted", "failed")
    wait_for(lambda: not psutil.pid_exists(job["pid"]) or psutil.Process(job["pid"]).status() == "zombie",
             timeout=30, what="the silent worker's process gone")
    assert _task(d, task)["result"] == f"result of {task}"


@pytest.mark.parametrize("resume", [True, False])
def test_board_survives_a_daemon_kill_and_claims_are_repaired(make_daemon, api, brain, resume):
    d = _daemon(make_daemon, api, kanban={"dispatch_interval_seconds": 0.2, "max_spawn_failures": 1},
                delegation={"resume_on_restart": resume})
    task = d.call("kanban.create", title="hang until the daemon dies", assignee="coder")["id"]
    first = _live_worker(d, task)
    wait_for(lambda: task in brain.hung, timeout=60, what="the worker waiting for its model")
    d.kill9()
    d.start()
    wait_for(lambda: _task(d, task)["status"] == "done", timeout=120, what="the task done after the restart")
    final = _task(d, task)
    reclaimed = [e for e in _events(d) if e["type"] == "kanban.reclaimed"]
    if resume:  # the worker resumed in a new child, holding its claim: one attempt, done to the end
        assert final["attempts"] == 1 and final["failures"] == 0 and final["result"] == f"result of {task}"
        worker = d.wait_job(first["id"])
        assert worker["status"] == "completed" and worker["resumes"] == 1, worker
        assert reclaimed == []
        return
    # the worker died with the daemon: its job is lost and its task went back to the queue without
    # a failure (max_spawn_failures is 1: a failure would have blocked it), then ran again to the end
    assert final["attempts"] == 2 and final["failures"] == 0 and final["result"] == f"result of {task}"
    lost = d.call("job", id=first["id"])
    assert lost["status"] == "lost" and lost["error"].endswith("(delegation.resume_on_restart)"), lost
    assert [(e["data"]["worker"], e["data"]["failure"]) for e in reclaimed] == [(first["id"], False)]


def test_workers_count_against_max_children(make_daemon, api, brain):
    d = _daemon(make_daemon, api, supervisor={"max_children": 1})
    gate = d.call("kanban.create", title="gate", assignee="coder", triage=True)["id"]
    tasks = [d.call("kanban.create", title=f"job {i}", assignee="coder", priority=i, parents=[gate])["id"]
             for i in range(3)]
    d.call("kanban.unblock", id=gate)  # when the gate is done, the three are ready at once
    claimed = []

    def all_done():
        board = {t["id"]: t for t in d.call("kanban.list")["tasks"]}
        claimed.append(sum(1 for t in board.values() if t["status"] == "running"))
        return all(board[t]["status"] == "done" for t in tasks)

    wait_for(all_done, timeout=240, interval=0.1, what="three tasks done one at a time")
    assert max(claimed) <= 2  # one worker running, at most one more waiting for the slot
    workers = sorted((d.wait_job(_task(d, t)["worker"], timeout=60) for t in tasks), key=lambda w: w["started_at"])
    for before, after in zip(workers, workers[1:]):
        assert before["completed_at"] <= after["started_at"], "two workers ran at once"
    # highest priority first
    assert [w["parent"] for w in workers] == list(reversed(tasks))
    assert d.call("job", id=_task(d, gate)["worker"])["completed_at"] <= workers[0]["started_at"]
