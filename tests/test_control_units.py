"""Issue 19 in-process: the subagent tools' requests, structured output checks, the activity
throttle, and the job-end hook runner's failure handling."""

from __future__ import annotations

import json
import time

import pytest

from child import structured
from child.activity import Activity
from child.tools import ToolContext, ToolError
from child.tools import delegation as tools
from hermesd.protocol import ProtocolError
from hermesd.delegation.tasks import check_schema


class FakeChannel:
    """Records ``call``s and answers from ``answers`` (an exception is raised)."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def call(self, op, timeout=30.0, **args):
        self.calls.append((op, args))
        answer = self.answers[op]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_subagent_tools_send_their_ops_and_show_not_found_to_the_model(tmp_path):
    channel = FakeChannel({"child.children": {"subagents": [{"id": "bg_1", "status": "running"}]},
                           "child.steer": {"id": "bg_1", "unread": 1},
                           "child.stop_child": ProtocolError("not_found", "you started no subagent 'deleg_x'")})
    ctx = ToolContext(cwd=str(tmp_path), channel=channel)
    by_name = {t.name: t for t in tools.TOOLS}
    assert json.loads(by_name["list_subagents"].handler({}, ctx))["subagents"][0]["id"] == "bg_1"
    by_name["steer_subagent"].handler({"id": "bg_1", "message": "narrow it"}, ctx)
    with pytest.raises(ToolError, match="not_found"):
        by_name["stop_subagent"].handler({"id": "deleg_x"}, ctx)
    assert [c[0] for c in channel.calls] == ["child.children", "child.steer", "child.stop_child"]
    assert channel.calls[1][1] == {"id": "bg_1", "message": "narrow it"}


def test_delegate_task_passes_timeout_and_output_schema_to_every_task():
    tasks = tools._tasks({"tasks": [{"goal": "a"}, {"goal": "b", "timeout_seconds": 5}],
                          "timeout_seconds": 60, "output_schema": {"type": "object"}})
    assert [t["timeout_seconds"] for t in tasks] == [60, 5]
    assert all(t["output_schema"] == {"type": "object"} for t in tasks)


@pytest.mark.parametrize("text, ok", [('{"n": 1}', True), ('```json\n{"n": 1}\n```', True),
                                      ('{"n": "1"}', False), ("one", False)])
def test_output_check(text, ok):
    value, problem = structured.check(text, {"type": "object", "properties": {"n": {"type": "integer"}}})
    assert (problem is None) == ok
    if ok:
        assert value == {"n": 1}
    else:
        assert problem


def test_an_invalid_schema_names_the_path_inside_it():
    with pytest.raises(ProtocolError) as err:
        check_schema({"type": "object", "properties": {"items": {"type": "array", "minItems": -1}}})
    assert err.value.code == "bad_request" and err.value.details["path"] == "$.properties.items.minItems"


def test_activity_reports_are_throttled_and_only_after_new_activity():
    sent = []
    activity = Activity(sent.append, interval=0.05)
    activity.begin("waiting for the model")
    activity.tick()
    assert sent == ["waiting for the model"]  # nothing new yet
    for _ in range(100):
        activity.touch("streaming")
    activity.tick()
    assert len(sent) == 1  # within the interval
    time.sleep(0.06)
    activity.tick()
    activity.tick()
    assert sent == ["waiting for the model", "streaming"]
    time.sleep(0.06)
    activity.tick()
    assert len(sent) == 2  # no activity since: no report, so a hung call goes stale
