"""A tool call that waits for a person: the child's side of an approval request.

A command the tripwire holds (:mod:`child.tools.policy`) or a call of a tool the config marks
``approval: always`` (``approvals.always``) is not run at once: :func:`ask` sends the daemon
``child.approval`` (the tool, its arguments, why it needs a person) and waits for the answer,
asking ``child.approval_wait`` again every :data:`WAIT_SECONDS` (so a stop of the job is seen
within that time, and each question is a sign of life: a waiting job is not stale).  No model
call is in flight meanwhile, and the job's wall clock (``timeout_seconds``) is paused.  The daemon refuses at once when nobody can be reached (no hook,
nobody following the approvals): today's default.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from child.tools import ToolContext, daemon_call

WAIT_SECONDS = 1.0
"""How long one ``child.approval_wait`` may wait in the daemon before it answers ``pending``."""

NO_DAEMON = ("there is no hermesd to ask a person; dangerous commands run only when "
             "delegation.subagent_auto_approve is true")
"""The refusal without a daemon (a tool run outside a job)."""


def always(tool: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether ``tool`` is one of ``approvals.always``: a name, or a shell-style pattern such as
    ``mcp__github__*`` (every tool of the MCP server ``github``; :func:`fnmatch.fnmatchcase`)."""
    return tool in patterns or any(any(c in p for c in "*?[") and fnmatch.fnmatchcase(tool, p) for p in patterns)


def waiting(channel: Any, call: dict[str, Any]) -> bool:
    """Whether tool call ``call`` (a ``tool_use`` block) of this job has a request still waiting
    for a person (``child.approval_find``): a call a restart interrupted while it waited never
    ran, so it may run again — it asks again and waits for the same answer.  False without a
    channel or when the daemon cannot say."""
    if channel is None or not isinstance(call.get("input"), dict):
        return False
    try:
        return bool(channel.call("child.approval_find", timeout=10.0, tool=call.get("name"),
                                 arguments=call["input"]).get("pending"))
    except Exception:  # noqa: BLE001 - not known: the call counts as interrupted, as without approvals
        return False


def ask(ctx: ToolContext, tool: str, arguments: dict[str, Any], why: str) -> str | None:
    """Wait for a person's answer to the call of ``tool`` with ``arguments`` (``why``: what holds it).

    Returns None when it was approved, else the denial the model is told (the person's
    reason, the time-out, nobody to ask, the job stopped).  Raises ``ToolError`` when the
    daemon cannot be asked (:func:`child.tools.daemon_call`).
    """
    if ctx.channel is None:
        return NO_DAEMON
    request = daemon_call(ctx, "child.approval", tool=tool, arguments=arguments, why=why)
    if ctx.budget is not None and request["state"] == "pending":
        ctx.budget.pause()  # a person's time is not the job's: its timeout_seconds does not run meanwhile
    try:
        while request["state"] == "pending":
            if ctx.stop.is_set():
                return "not run: the job was asked to stop while it waited for approval"
            ctx.heartbeat(f"waiting for a person to approve {tool} (request {request['id']})")
            request = daemon_call(ctx, "child.approval_wait", timeout=WAIT_SECONDS + 30, id=request["id"],
                                  seconds=WAIT_SECONDS)
    finally:
        if ctx.budget is not None:
            ctx.budget.resume()
    if request["state"] == "approved":
        return None
    return request.get("reason") or f"request {request.get('id')} was {request['state']}"
