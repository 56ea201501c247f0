"""Toolsets and the registry: resolution (``all``/``*`` never include kanban),
error results for unknown tools and bad arguments, and the delegation and kanban
tools forwarding over a fake channel."""

from __future__ import annotations

import json

import pytest

from child.tools.registry import (TOOLSETS, Tool, ToolContext, ToolError, execute, known_tool_names,
                                  resolve_toolsets, tools_for)
from hermesd.protocol import ProtocolError


class FakeChannel:
    """Records ``call``s and answers with ``answer`` (or raises it when it is an exception)."""

    def __init__(self, answer=None):
        self.answer = answer
        self.calls = []

    def call(self, op, /, timeout=30.0, **args):
        self.calls.append((op, timeout, args))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def ctx(tmp_path):
    return ToolContext(cwd=str(tmp_path), job="deleg_1", depth=0, max_spawn_depth=1)


def test_toolsets_and_their_tools():
    assert list(TOOLSETS) == ["terminal", "file", "web", "delegation", "kanban"]
    assert TOOLSETS["file"] == ["read_file", "write_file", "patch_file", "list_files"]
    assert TOOLSETS["delegation"] == ["delegate_task", "spawn_agent", "spawn_parallel", "list_subagents",
                                      "steer_subagent", "stop_subagent"]
    names = known_tool_names()
    assert names == sorted(names) and len(names) == sum(map(len, TOOLSETS.values())) == 23


def test_the_registry_checks_itself_against_the_contract():
    """The tool modules define exactly the contract's tools, each in its toolset; any
    disagreement is an ImportError naming it (raised when the registry is imported)."""
    from child.tools import registry
    from hermesd.contract import toolsets

    registry.check_against_contract(registry._DEFINED, toolsets.TOOLSETS)
    assert TOOLSETS == {ts: list(names) for ts, names in toolsets.TOOLSETS.items()}
    stray = Tool("new_tool", "file", "d", {"type": "object"}, lambda args, ctx: "")
    with pytest.raises(ImportError, match="'new_tool' .* is in no toolset"):
        registry.check_against_contract([*registry._DEFINED, stray], toolsets.TOOLSETS)
    with pytest.raises(ImportError, match="names 'ghost', which no tool module defines"):
        registry.check_against_contract(registry._DEFINED, {**toolsets.TOOLSETS, "web": ("web_extract", "web_search",
                                                                                            "ghost")})
    moved = {**toolsets.TOOLSETS, "terminal": (), "file": ("terminal", *toolsets.TOOLSETS["file"])}
    with pytest.raises(ImportError, match="'terminal' says toolset 'terminal'; .* in 'file'"):
        registry.check_against_contract(registry._DEFINED, moved)


@pytest.mark.parametrize("spec", [["all"], ["*"], ["all", "terminal"], ["*", "file", "all"]])
def test_all_and_star_never_include_kanban(spec):
    assert resolve_toolsets(spec) == ["terminal", "file", "web", "delegation"]
    assert "kanban_create" not in {t.name for t in tools_for(spec)}


def test_kanban_only_by_its_literal_name():
    assert resolve_toolsets(["all", "kanban"]) == ["terminal", "file", "web", "delegation", "kanban"]
    assert resolve_toolsets(["kanban"]) == ["kanban"]
    assert resolve_toolsets(["web", "terminal", "web"]) == ["terminal", "web"]
    assert resolve_toolsets([]) == []


def test_unknown_toolsets_are_named():
    with pytest.raises(ValueError, match=r"unknown toolset\(s\): 'browser', 'clarify'"):
        resolve_toolsets(["terminal", "browser", "clarify"])


def test_tool_specs_are_provider_ready():
    for tool in tools_for(["all", "kanban"]):
        assert isinstance(tool, Tool)
        spec = tool.spec()
        assert set(spec) == {"name", "description", "input_schema"}
        assert spec["input_schema"]["type"] == "object" and spec["description"]
        json.dumps(spec)


def test_unknown_and_disallowed_tools_are_error_results(ctx):
    unknown = execute("browser_click", {}, ctx)
    assert not unknown.ok and "unknown tool: 'browser_click'" in unknown.content
    disallowed = execute("terminal", {"command": "echo hi"}, ctx, allowed=["read_file"])
    assert not disallowed.ok and "not available" in disallowed.content and "read_file" in disallowed.content


@pytest.mark.parametrize("name,args,expected", [
    ("terminal", {}, "field 'command' is required"),
    ("terminal", {"command": 5}, "field 'command' must be of type string, not int"),
    ("terminal", {"command": "ls", "cwd": "/"}, "field 'cwd' is not an argument of this tool"),
    ("terminal", {"command": "ls", "timeout": 0}, "field 'timeout' must be greater than 0"),
    ("read_file", {"path": "x", "offset": 0}, "field 'offset' must be at least 1"),
    ("delegate_task", {"tasks": [{"goal": "a"}, {"goal": 7}]}, "field 'tasks[1].goal' must be of type string"),
    ("kanban_list", {"status": "nope"}, "field 'status' must be one of triage"),
    ("write_file", "not a dict", "arguments must be a JSON object"),
])
def test_bad_arguments_name_tool_and_field(ctx, name, args, expected):
    result = execute(name, args, ctx)
    assert not result.ok
    assert f"'{name}'" in result.content and expected in result.content


def test_handler_failures_become_error_results(ctx, monkeypatch):
    from child.tools import registry

    def broken(args, ctx):
        raise RuntimeError("boom")

    monkeypatch.setitem(registry._TOOLS, "terminal", Tool("terminal", "terminal", "x",
                                                          registry._TOOLS["terminal"].input_schema, broken))
    result = execute("terminal", {"command": "true"}, ctx)
    assert not result.ok and "failed unexpectedly: RuntimeError: boom" in result.content


# --- delegation -------------------------------------------------------------------------------

RESULTS = [{"status": "completed", "summary": f"done {i}", "api_calls": 2, "duration_seconds": 1.5,
            "tokens": {"input": 10, "output": 5}, "trace": [{"name": "terminal", "ok": True, "bytes": 3}]}
           for i in range(2)]


def test_delegate_one_goal(ctx):
    ctx.channel = FakeChannel([RESULTS[0]])
    result = execute("delegate_task", {"goal": "count files", "context": "in src", "toolsets": ["file"]}, ctx)
    assert result.ok, result.content
    assert ctx.channel.calls == [("child.delegate", None, {
        "tasks": [{"goal": "count files", "context": "in src", "toolsets": ["file"]}], "background": False})]
    assert json.loads(result.content) == {"results": [{"task": 0, "goal": "count files", **RESULTS[0]}]}


def test_parallel_tasks_inherit_shared_fields_and_keep_order(ctx):
    ctx.channel = FakeChannel(RESULTS)
    args = {"tasks": [{"goal": "a"}, {"prompt": "b", "model": "m2"}], "model": "m1", "role": "leaf"}
    result = execute("spawn_parallel", args, ctx)
    assert result.ok, result.content
    tasks = ctx.channel.calls[0][2]["tasks"]
    assert tasks == [{"goal": "a", "model": "m1", "role": "leaf"}, {"goal": "b", "model": "m2", "role": "leaf"}]
    assert [r["summary"] for r in json.loads(result.content)["results"]] == ["done 0", "done 1"]


def test_background_dispatch(ctx):
    ctx.channel = FakeChannel({"status": "dispatched", "delegation_id": "deleg_ab12"})
    result = execute("spawn_agent", {"goal": "research", "background": True}, ctx)
    assert ctx.channel.calls[0][2]["background"] is True
    assert json.loads(result.content) == {"status": "dispatched", "delegation_id": "deleg_ab12"}


@pytest.mark.parametrize("args,expected", [
    ({"tasks": [{"goal": str(i)} for i in range(9)]}, "9 tasks given, at most 8 per call"),
    ({"goal": "a", "tasks": [{"goal": "b"}]}, "either 'goal'"),
    ({"context": "c"}, "either 'goal'"),
    ({"tasks": [{"context": "no goal"}]}, "tasks[0] has no 'goal'"),
])
def test_malformed_delegations_never_reach_the_daemon(ctx, args, expected):
    ctx.channel = FakeChannel([])
    result = execute("delegate_task", args, ctx)
    assert not result.ok and expected in result.content
    assert ctx.channel.calls == []


def test_depth_limit_checked_before_asking(ctx):
    ctx.channel, ctx.depth = FakeChannel([]), 1
    result = execute("delegate_task", {"goal": "deeper"}, ctx)
    assert not result.ok and "depth_limit" in result.content and ctx.channel.calls == []


def test_daemon_errors_become_tool_errors(ctx):
    ctx.channel = FakeChannel(ProtocolError("capacity_reached", "3 background delegations already run; "
                                                                "run it in the foreground or wait"))
    result = execute("delegate_task", {"goal": "x", "background": True}, ctx)
    assert not result.ok
    assert result.content == ("delegate_task: capacity_reached: 3 background delegations already run; "
                              "run it in the foreground or wait")


def test_no_channel_is_a_clear_error(ctx):
    result = execute("delegate_task", {"goal": "x"}, ctx)
    assert not result.ok and "needs a connection to hermesd" in result.content


# --- kanban -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,args", [
    ("kanban_create", {"title": "Write docs", "assignee": "coder", "parents": ["kb_1"], "priority": 2}),
    ("kanban_link", {"parent": "kb_1", "child": "kb_2"}),
    ("kanban_list", {"status": "ready"}),
    ("kanban_show", {"id": "kb_1"}),
    ("kanban_comment", {"id": "kb_1", "text": "looks good"}),
    ("kanban_unblock", {"id": "kb_1"}),
    ("kanban_my_task", {}),
    ("kanban_complete", {"result": "done", "artifacts": ["docs/x.md"]}),
    ("kanban_block", {"reason": "no API key"}),
    ("kanban_heartbeat", {}),
])
def test_kanban_tools_forward_to_the_daemon(ctx, name, args):
    ctx.channel = FakeChannel({"id": "kb_1", "status": "ready"})
    result = execute(name, args, ctx)
    assert result.ok, result.content
    verb = name.removeprefix("kanban_")
    assert ctx.channel.calls == [("child.call", 30.0, {"op": f"kanban.{verb}", "args": args})]
    assert json.loads(result.content) == {"id": "kb_1", "status": "ready"}


def test_kanban_daemon_error(ctx):
    ctx.channel = FakeChannel(ProtocolError("not_found", "no task kb_9"))
    result = execute("kanban_show", {"id": "kb_9"}, ctx)
    assert not result.ok and result.content == "kanban_show: not_found: no task kb_9"


def test_tool_error_is_importable_from_the_registry():
    assert issubclass(ToolError, Exception)


def test_kanban_through_a_real_channel(ctx, tmp_path):
    import threading

    import zmq

    from child.channel import Channel
    from hermesd import protocol

    path = str(tmp_path / "children.sock")
    zctx = zmq.Context.instance()
    router = zctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{path}")
    seen, done = [], threading.Event()

    def serve():
        while not done.is_set():
            if not router.poll(50):
                continue
            ident, frame = router.recv_multipart()
            request = protocol.decode_request(frame)
            seen.append((request.op, request.args))
            router.send_multipart([ident, protocol.encode_reply(request.id, {"id": "kb_1"})])
            return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ctx.channel = Channel(path, "kb_1", "tok")
    try:
        result = execute("kanban_my_task", {}, ctx)
        if "TypeError" in result.content:
            raise TypeError(result.content)
        assert result.ok and json.loads(result.content) == {"id": "kb_1"}
        assert seen == [("child.call", {"job": "kb_1", "token": "tok", "op": "kanban.my_task", "args": {}})]
    finally:
        ctx.channel.close()
        done.set()
        thread.join(5)
        router.close(0)
