"""Sessions with the real SDK against the fake Messages API: background
delegation, delivery as new turns exactly once (also across kill -9), caps,
depth and toolset rules, /background and /stop."""

from __future__ import annotations

import json
import time

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Message, last_user_text, text_block, tool_use_block
from tests.harness import wait_for, command_line

MAIN = "persistent agent"  # a phrase of the main agent's system prompt


def _system(request) -> str:
    system = request.body.get("system") or ""
    return system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)


def _last_is_tool_result(request) -> bool:
    content = request.body["messages"][-1]["content"]
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def _tools(request) -> list[str]:
    return [t["name"] for t in request.body.get("tools") or []]


class Brain:
    """Decides the fake model's replies; records what each agent saw."""

    def __init__(self, child_delay: float = 1.0, slow_turn: float = 2.0):
        self.child_delay = child_delay
        self.slow_turn = slow_turn
        self.child_tools: list[list[str]] = []
        self.tool_results: list[str] = []

    def __call__(self, request):
        text = last_user_text(request)
        if MAIN not in _system(request):  # a subagent
            self.child_tools.append(_tools(request))
            if "use delegation" in text and "delegate_task" in _tools(request) and not _last_is_tool_result(request):
                return Message([tool_use_block("delegate_task", {"goal": "grandchild"})], stop_reason="tool_use")
            time.sleep(self.child_delay)
            return Message([text_block(f"child result for: {text[:60]}")])
        if _last_is_tool_result(request):
            result = request.body["messages"][-1]["content"][0]
            self.tool_results.append(result.get("content"))
            return Message([text_block(f"tool said: {json.dumps(result.get('content'))[:300]}")])
        if text.startswith("delegate three"):
            tasks = [{"goal": f"task {i}", "toolsets": ["terminal", "web", "kanban"]} for i in range(3)]
            return Message([tool_use_block("delegate_task", {"tasks": tasks, "background": True})],
                           stop_reason="tool_use")
        if text.startswith("delegate one more"):
            return Message([tool_use_block("delegate_task", {"goal": "task 4", "background": True})],
                           stop_reason="tool_use")
        if text.startswith("delegate foreground"):
            return Message([tool_use_block("spawn_parallel", {"tasks": [{"goal": "use delegation please"},
                                                                          {"goal": "plain"}]})],
                           stop_reason="tool_use")
        if text.startswith("talk slowly"):
            time.sleep(self.slow_turn)
            return Message([text_block("slow reply")])
        if text.startswith("[Async delegation"):
            return Message([text_block("noted " + text.split()[2])])
        return Message([text_block(f"echo: {text[:80]}")])


@pytest.fixture
def api():
    with FakeAnthropic() as server:
        yield server


def _daemon(make_daemon, api, **config):
    cfg = {"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal", "file"], **config}
    return make_daemon(cfg, env={"ANTHROPIC_API_KEY": "test-key"})


def _send(d, session, text):
    return d.call("session.send", session=session, text=text, cwd=str(d.work))


def _history(d, session):
    return d.call("session.history", session=session)["messages"]


def test_background_completions_arrive_as_new_turns_exactly_once(make_daemon, api):
    brain = Brain(child_delay=1.0, slow_turn=2.5)
    api.default = brain
    d = _daemon(make_daemon, api)
    first = _send(d, "main", "delegate three reports")["turn"]
    assert d.wait_job(first["id"])["status"] == "completed"
    dispatched = [j for j in d.call("ps", all=True)["jobs"] if j["kind"] == "background"]
    assert len(dispatched) == 3
    # the session goes on talking while the children work
    slow = _send(d, "main", "talk slowly please")["turn"]
    wait_for(lambda: len([m for m in _history(d, "main") if m["notification"]]) == 3, timeout=60,
             what="three deliveries")
    history = _history(d, "main")
    delivered = [m["notification"] for m in history if m["notification"]]
    assert sorted(delivered) == sorted(j["id"] for j in dispatched)  # each exactly once
    # never inside a turn: every turn's messages are contiguous, and turns never overlapped
    jobs_in_order = [m["job"] for m in history]
    for job in set(jobs_in_order):
        idx = [i for i, j in enumerate(jobs_in_order) if j == job]
        assert idx == list(range(idx[0], idx[-1] + 1)), "a turn's messages were interleaved"
    turns = sorted((d.call("job", id=j) for j in set(jobs_in_order)), key=lambda r: r["started_at"])
    for before, after in zip(turns, turns[1:]):
        assert before["completed_at"] <= after["started_at"]
    # deliveries came after the slow turn, which was running when the children finished
    slow_done = d.call("job", id=slow["id"])["completed_at"]
    for job in {m["job"] for m in history if m["notification"]}:
        assert d.call("job", id=job)["started_at"] >= slow_done
    block = next(m for m in history if m["notification"])["content"]
    for part in ("[Async delegation", "Dispatched:", "Goal: task", "Context:", "Toolsets:", "Role:", "Model:",
                 "Status: completed", "API calls:", "Duration:", "Result:", "child result for"):
        assert part in block
    # the model saw no kanban, no delegation: requested ∩ parent's, children never delegate
    assert all("kanban_create" not in tools and "delegate_task" not in tools for tools in brain.child_tools)
    assert any("terminal" in tools for tools in brain.child_tools)


def test_fourth_background_task_gets_a_tool_error(make_daemon, api):
    brain = Brain(child_delay=4.0)
    api.default = brain
    d = _daemon(make_daemon, api)
    assert d.wait_job(_send(d, "s", "delegate three things")["turn"]["id"])["status"] == "completed"
    turn = d.wait_job(_send(d, "s", "delegate one more")["turn"]["id"])
    assert "capacity_reached" in turn["summary"] or "already running" in turn["summary"]
    assert "foreground" in turn["summary"]
    assert len([j for j in d.call("ps", all=True)["jobs"] if j["kind"] == "background"]) == 3


def test_depth_limit_and_foreground_group_results_in_order(make_daemon, api):
    brain = Brain(child_delay=0.2)
    api.default = brain
    d = _daemon(make_daemon, api)
    turn = d.wait_job(_send(d, "s", "delegate foreground group")["turn"]["id"], timeout=90)
    assert turn["status"] == "completed"
    content = brain.tool_results[-1]
    results = json.loads(content if isinstance(content, str) else content[0]["text"])
    assert [r["goal"] for r in results["results"]] == ["use delegation please", "plain"]
    assert all(r["status"] == "completed" for r in results["results"])
    for r in results["results"]:
        assert {"summary", "api_calls", "duration_seconds", "tokens", "trace"} <= set(r)
    # a child never got the delegation toolset (default max_spawn_depth = 1)
    assert all("delegate_task" not in tools for tools in brain.child_tools)


def test_kill9_between_completion_and_delivery_delivers_once(make_daemon, api):
    brain = Brain(child_delay=0.5, slow_turn=60)
    api.default = brain
    d = _daemon(make_daemon, api)
    assert d.wait_job(_send(d, "main", "delegate three items")["turn"]["id"])["status"] == "completed"
    slow = _send(d, "main", "talk slowly, forever")["turn"]
    children = [j["id"] for j in d.call("ps", all=True)["jobs"] if j["kind"] == "background"]
    for job in children:
        assert d.wait_job(job)["status"] == "completed"
    # completions are durable but cannot be delivered: the session is busy
    assert d.call("job", id=slow["id"])["status"] == "running"
    assert not [m for m in _history(d, "main") if m["notification"]]
    d.kill9()
    brain.slow_turn = 0.1
    d.start()
    wait_for(lambda: len([m for m in _history(d, "main") if m["notification"]]) >= 3, timeout=60,
             what="deliveries after restart")
    d.stop()
    d.start()  # a second restart must not deliver again
    delivered = [m["notification"] for m in _history(d, "main") if m["notification"]]
    assert sorted(delivered) == sorted(children)
    assert d.call("status")["pending_notifications"] == 0


def test_slash_background_tasks_and_stop(make_daemon, api):
    brain = Brain(child_delay=30)
    api.default = brain
    d = _daemon(make_daemon, api)
    answer = _send(d, "ops", "/background check all servers")
    assert answer["status"] == "dispatched" and answer["delegation_id"].startswith("bg_")
    tasks = _send(d, "ops", "/tasks")["tasks"]
    assert [t["id"] for t in tasks] == [answer["delegation_id"]]
    # a new message never kills background children
    assert d.wait_job(_send(d, "ops", "hello there")["turn"]["id"])["status"] == "completed"
    assert d.call("job", id=answer["delegation_id"])["status"] in ("starting", "running")
    stopped = _send(d, "ops", "/stop")["stopped"]
    assert answer["delegation_id"] in stopped
    final = d.wait_job(answer["delegation_id"], timeout=30)
    assert final["status"] == "interrupted"
    wait_for(lambda: not [p for p in d.children() if "child" in command_line(p)], timeout=30,
             what="no child of the session alive")
    wait_for(lambda: any(m["notification"] == answer["delegation_id"] for m in _history(d, "ops")),
             what="the /background result delivered back to the session")


def test_slash_background_result_arrives(make_daemon, api):
    api.default = Brain(child_delay=0.1)
    d = _daemon(make_daemon, api)
    answer = _send(d, "s2", "/background summarise the logs")
    wait_for(lambda: any(m["notification"] == answer["delegation_id"] for m in _history(d, "s2")), timeout=60,
             what="delivery")
    msgs = _history(d, "s2")
    assert "Status: completed" in msgs[0]["content"] and msgs[1]["role"] == "assistant"
    with pytest.raises(Exception):
        _send(d, "s2", "/bogus")


def test_child_toolsets_rules():
    from hermesd.delegation.service import child_toolsets

    assert child_toolsets(["terminal", "web", "kanban"], ["terminal", "file"], "leaf", 1, 1) == ["terminal"]
    assert child_toolsets(["delegation", "file"], ["delegation", "file"], "leaf", 1, 2) == ["file"]
    assert child_toolsets(["delegation", "file"], ["delegation", "file"], "orchestrator", 1, 2) == ["delegation", "file"]
    assert child_toolsets(["delegation"], ["delegation"], "orchestrator", 2, 2) == []
    assert child_toolsets(["memory", "clarify", "file"], ["memory", "clarify", "file"], "leaf", 1, 1) == ["file"]


def test_history_says_under_its_message_how_a_turn_that_did_not_complete_ended(make_daemon, api):
    api.default = Brain()
    d = _daemon(make_daemon, api, budgets={"session_daily_tokens": 1})
    for text in ("first words", "over budget"):
        d.wait_job(_send(d, "s", text)["turn"]["id"])
    refused = d.call("session.history", session="s")["unfinished"]
    assert [t["status"] for t in refused] == ["failed"] and "budget" in refused[0]["error"], refused
    lines = d.ctl("history", "s").stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("user: over budget"))
    assert lines[at + 1] == f"── turn {refused[0]['job']} failed: {refused[0]['error']} ──", lines
