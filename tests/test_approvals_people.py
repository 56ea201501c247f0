"""Approvals answered where people are: an open ``hermesctl chat`` shows its session's requests as
they arrive and answers them (``/approve``, ``/deny``), and counts as someone to ask only while
it is open; ``hermesctl top`` lists the pending ones and answers the selected one."""

from __future__ import annotations

import json

from tests.fakes.anthropic_server import Message, last_user_text, tool_use_block
from tests.harness import wait_for
from tests.test_approvals import HELD
from tests.test_cli_terminal import api, terminals  # noqa: F401 (fixtures)
from tests.test_sessions import Brain, _daemon, _last_is_tool_result


class Asker(Brain):
    """A session agent that runs the held command when told ``run held``."""

    def __call__(self, request):
        if last_user_text(request).startswith("run held") and not _last_is_tool_result(request):
            return Message([tool_use_block("terminal", {"command": HELD})], stop_reason="tool_use")
        return super().__call__(request)


def _requests(daemon, state: str = "all") -> list[dict]:
    return daemon.call("approvals.list", state=state)["approvals"]


def test_chat_shows_its_sessions_requests_answers_them_and_counts_only_while_open(make_daemon, api, terminals):
    api.default = brain = Asker()
    daemon = _daemon(make_daemon, api)
    assert not daemon.call("approvals.list", session="main")["reachable"]
    term = terminals(daemon, "chat", "main", width=120)
    term.wait("you>")
    wait_for(lambda: daemon.call("approvals.list", session="main")["reachable"], what="the chat counted")
    assert not daemon.call("approvals.list", session="other")["reachable"], "only for its own session"

    term.type("run held please")
    request = wait_for(lambda: _requests(daemon, "pending"), what="the request")[0]
    term.wait(f"/approve {request['id']}  or  /deny {request['id']} REASON")
    assert "curl-x" in term.screen()
    term.type(f"/approve {request['id']}")
    term.wait(f"[approval {request['id']} approved")
    term.wait("agent> tool said:")
    assert "ran-it" in brain.tool_results[-1]

    term.type("run held again")
    second = wait_for(lambda: _requests(daemon, "pending"), what="the second request")[0]
    term.type(f"/deny {second['id']} not today")
    term.wait(f"[approval {second['id']} denied")
    term.wait(lambda s: s.count("agent> tool said:") == 2, what="the second reply")
    assert "not today" in brain.tool_results[-1] and "ran-it" not in brain.tool_results[-1]
    term.type("/help")
    term.wait("/deny ID [REASON] refuses it")

    term.keys("C-d")
    term.wait("[exit 0]")
    assert not daemon.call("approvals.list", session="main")["reachable"], "a chat that left is nobody to ask"
    turn = daemon.call("session.send", session="main", text="run held once more", cwd=str(daemon.work))["turn"]
    assert daemon.wait_job(turn["id"])["status"] == "completed"
    assert "nobody to ask" in json.dumps(brain.tool_results[-1])
    assert len(_requests(daemon)) == 2, "refused at once, not stored"


def test_top_shows_waiting_jobs_and_answers_the_selected_one(make_daemon, terminals):
    from tests.test_approvals import HOOK, SCRIPT, _tool_result

    daemon = make_daemon(config=HOOK)
    first = daemon.delegate("run it", script=SCRIPT, toolsets=["terminal"])["id"]
    request = wait_for(lambda: _requests(daemon, "pending"), what="the request")[0]
    term = terminals(daemon, "top")
    screen = term.wait(f"{first}  running  APPROVAL? {request['id']}", what="the job marked as waiting")
    assert all(len(line) <= 80 for line in screen.splitlines()) and len(screen.splitlines()) <= 24
    assert "approvals · batches" in screen
    term.keys("a")  # asks first: n keeps it waiting
    term.wait(f"Approve {request['id']} of {first}?")
    term.keys("n")
    term.wait(lambda s: f"Approve {request['id']}" not in s, what="the question gone")
    assert _requests(daemon, "pending")[0]["id"] == request["id"]
    term.keys("a")
    term.wait(f"Approve {request['id']} of {first}?")
    term.keys("y")
    assert daemon.wait_job(first)["status"] == "completed"
    assert "ran-it" in _tool_result(daemon, first)

    second = daemon.delegate("run it again", script=SCRIPT, toolsets=["terminal"])["id"]
    denied = wait_for(lambda: _requests(daemon, "pending"), what="the second request")[0]
    screen = term.wait(f"{second}  running  APPROVAL? {denied['id']}")
    term.keys("d")  # the cursor stays on the first job (now finished), which waits for nothing
    term.wait("waits for no", what="the warning")
    # the second job is selected by what it is: its row is found on the screen, wherever the
    # board's order put it (live jobs first, then the newest finished), relative to the first's
    rows = [line[1:].split()[0] for line in screen.splitlines() if line.startswith("│deleg_")]
    step = rows.index(second) - rows.index(first)
    term.keys(*["Down" if step > 0 else "Up"] * abs(step))
    term.keys("d")
    term.wait(f"Deny {denied['id']} of {second}?")
    term.type("not on this box")
    assert daemon.wait_job(second)["status"] == "completed"
    assert "not on this box" in _tool_result(daemon, second)
    term.wait(lambda s: "APPROVAL?" not in s, what="no job marked waiting")
    term.keys("q")
    term.wait("[exit 0]")
