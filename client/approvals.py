"""``hermesctl approvals [--follow]``, ``hermesctl approve ID``, ``hermesctl deny ID [--reason …]``:
the tool calls that wait for a person (the daemon's ``approvals.*`` ops say what each does).

``--follow`` prints the pending requests, then each new one and each answer as it happens, and
tells the daemon every :data:`FOLLOW_EVERY` seconds that a person is watching (requests then
wait for an answer instead of being refused).  When the daemon goes away (a restart, a crash)
the follower says so, and once it is back says that too and tells it at once that a person is
watching (so a restarted daemon refuses no request for want of one), as ``wait`` does.
"""

from __future__ import annotations

import os
import time
from typing import Any

import click

from client import render
from client.calls import ClientError
from client.common import conn, is_json, json_option, out, print_all, show, who

FOLLOW_EVERY = 10.0
"""Seconds between two ``approvals.list {follow: true}`` of a follower (the daemon counts one for 30)."""
AWAY_POLL_SECONDS = 1.0
"""Seconds between two looks for the daemon while it is away."""


def request_line(r: dict[str, Any]) -> str:
    """One request as one line: id, state, job, tool, what it runs; its reason below once answered."""
    line = f"{r['id']:<16} {r['state']:<9} {r['job']:<18} {r['tool']:<12} {render.short(render.approval_what(r), 200)}"
    line += f"\n{'':<16} {r.get('why') or ''}" + (f" · parents {', '.join(r['chain'])}" if r.get("chain") else "")
    if r["state"] == "pending":
        line += f" · expires {r['expires_at']}"
    elif r.get("reason"):
        line += f"\n{'':<16} {r['reason']}"
    return line


@click.command("approvals")
@json_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new requests and answers; tell the daemon "
                                                    "a person is watching.")
@click.option("--all", "show_all", is_flag=True, help="Answered requests too.")
@click.option("--job", default=None, help="Only the requests of this job.")
def approvals_command(follow: bool, show_all: bool, job: str | None) -> None:
    """The tool calls waiting for a person (approve ID / deny ID answers one)."""
    answer = conn().call("approvals.list", state="all" if show_all else "pending", job=job, follow=follow)
    print_all(answer["approvals"], request_line, "no approval requests" + ("" if show_all else " waiting"))
    if not follow:
        if not answer["reachable"] and not is_json():
            out("(nobody to ask: requests are refused at once; --follow or hooks.on_approval_request makes them wait)")
        return
    since: int | None = None  # the last event seen (None: not asked yet)
    away = False  # the daemon could not be reached (said once, and once it is back)

    def check_in() -> None:
        """Tell the daemon a person is watching; while it is away, say so once."""
        nonlocal away
        try:
            conn().call("approvals.list", state="pending", follow=True, job=job)
        except ClientError as err:
            lost(err.message)
            return
        if away:
            away = False
            out("hermesctl: hermesd is back; following the approvals again", err=True)

    def lost(why: str | None) -> None:
        nonlocal away
        if why is None:
            check_in()
        elif not away:
            away = True
            out(f"hermesctl: {why}; following again once it is back", err=True)

    while True:  # in windows: between two, the daemon is told again that a person is watching
        if away:
            check_in()
        try:
            if since is None:
                since = conn().call("events_since", since=0, limit=1)["last_seq"]
            for event in conn().follow(since, idle=1.0, stop_after=FOLLOW_EVERY, lost=lost):
                since = event["seq"]
                if event["type"].startswith("approval.") and (job is None or event.get("job") == job):
                    render.emit_json(event["data"]) if is_json() else out(request_line(event["data"]))
        except ClientError as err:  # it went away before the window began: said once, tried again
            lost(err.message)
            time.sleep(AWAY_POLL_SECONDS)
            continue
        check_in()


def answer_request(op: str, request_id: str, **extra: Any) -> dict[str, Any]:
    """Answer request ``request_id`` with ``op`` (``approvals.approve``/``deny``) as this user and
    process; returns the request.  Raises ``ProtocolError``, ``ClientError``."""
    return conn().call(op, id=request_id, by=who(), pid=os.getpid(), **extra)


def _answer(op: str, request_id: str, **extra: Any) -> None:
    show(answer_request(op, request_id, **extra), request_line)


@click.command("approve")
@json_option
@click.argument("request_id", metavar="ID")
def approve_command(request_id: str) -> None:
    """Approve a waiting tool call: it runs."""
    _answer("approvals.approve", request_id)


@click.command("deny")
@json_option
@click.argument("request_id", metavar="ID")
@click.option("--reason", default=None, help="Why; the model is told it as the tool's result.")
def deny_command(request_id: str, reason: str | None) -> None:
    """Deny a waiting tool call: the model is told so (and why) and goes on."""
    _answer("approvals.deny", request_id, reason=reason)


COMMANDS = (approvals_command, approve_command, deny_command)
