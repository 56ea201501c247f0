"""Delegation from an agent: the daemon side of ``delegate_task``.

A child's tool call arrives as ``child.delegate {tasks, background}``.  The
rules, checked here and nowhere else:

* depth: a task runs one level below its parent; beyond
  ``delegation.max_spawn_depth`` the call fails with ``depth_limit``;
* toolsets: the requested ones intersected with the parent's; ``delegation``
  only for an ``orchestrator`` that may still delegate at its depth; never
  ``clarify`` or ``memory``;
* background tasks are admitted under ``delegation.max_async_children`` and
  rejected beyond it (the tool error tells the model to run in the foreground
  or wait); their completion returns to the parent's session as a new turn;
* a foreground group runs at most ``delegation.max_concurrent_children`` at
  once (a ``group:`` pool); results come back in task order;
* an agent sees, steers and stops only its own children (``parent`` is its
  job): any other id is ``not_found``.  A steer message waits in the child's
  inbox until the child fetches it before its next model call (``child.inbox``)
  and has journaled it (:mod:`hermesd.delegation.inbox`); a stopped child ends
  ``interrupted`` with its partial output.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from hermesd import jobs as jobs_mod
from hermesd.contract.states import LIVE, TERMINAL
from hermesd.delegation.inbox import Inbox
from hermesd.delegation.tasks import new_group, task_fields
from hermesd.protocol import ProtocolError
from hermesd.worktrees.ops import working_dir

if TYPE_CHECKING:
    from hermesd.context import Context

NEVER_FOR_CHILDREN = ("clarify", "memory")
MAX_STEER_BYTES = 64 * 1024
RESULT_FIELDS = ("id", "status", "exit_reason", "summary", "error", "api_calls", "duration_seconds", "tokens", "trace")


def child_toolsets(requested: list[str], parent: list[str], role: str, depth: int, max_depth: int) -> list[str]:
    """The toolsets a child gets: ``requested ∩ parent``, minus what children never get.

    ``delegation`` stays only for an ``orchestrator`` whose own children would
    still be within ``max_depth``.
    """
    allowed = [t for t in requested if t in parent and t not in NEVER_FOR_CHILDREN]
    if "delegation" in allowed and not (role == "orchestrator" and depth < max_depth):
        allowed.remove("delegation")
    return allowed


def result_of(row: dict[str, Any]) -> dict[str, Any]:
    """The per-task result handed back to the delegating agent."""
    rec = jobs_mod.record(row)
    return {k: rec.get(k) for k in RESULT_FIELDS}


async def delegate_from_child(ctx: Context, parent_id: str, args: dict[str, Any]) -> Any:
    """Run ``child.delegate`` for the job ``parent_id``.

    Returns a list of per-task results in task order (foreground), or for
    ``background`` one ``{"status": "dispatched", "delegation_id"}`` per task
    (a single map for a single task).  Raises ``ProtocolError``
    (``depth_limit``, ``capacity_reached``, ``bad_request``).
    """
    parent = ctx.jobs.require(parent_id)
    deleg = ctx.config.delegation
    depth = (parent.get("depth") or 0) + 1
    if depth > deleg.max_spawn_depth:
        raise ProtocolError("depth_limit", f"delegation depth {depth} exceeds delegation.max_spawn_depth="
                            f"{deleg.max_spawn_depth}: do this work yourself", {"depth": depth})
    tasks = args.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, dict) for t in tasks):
        raise ProtocolError("bad_request", "'tasks' must be a non-empty list of task maps", {"field": "tasks"})
    if len(tasks) > deleg.max_tasks_per_call:
        raise ProtocolError("bad_request", f"{len(tasks)} tasks in one call; at most {deleg.max_tasks_per_call} "
                            "(delegation.max_tasks_per_call)", {"field": "tasks"})
    parent_toolsets = parent.get("toolsets") or []
    fields = []
    for task in tasks:
        f = task_fields(ctx, {k: v for k, v in task.items() if k != "cwd"}, default_toolsets=parent_toolsets)
        f["toolsets"] = child_toolsets(f["toolsets"], parent_toolsets, f["role"], depth, deleg.max_spawn_depth)
        f.update(cwd=working_dir(parent), depth=depth, parent=parent_id, session=parent.get("session"))
        fields.append(f)
    if args.get("background"):
        if len(fields) == 1:
            return _dispatch(ctx, fields[0])
        answers = []
        for f in fields:
            try:
                answers.append(_dispatch(ctx, f))
            except ProtocolError as err:  # the others stay dispatched; say which one was refused
                answers.append({"status": "rejected", "error": err.to_wire()})
        return answers
    group = new_group()
    rows = [ctx.runner.submit("delegation", pools=(group,), **f) for f in fields]
    finished = await asyncio.gather(*(ctx.jobs.wait(r["id"]) for r in rows))
    return [result_of(row) for row in finished]


def _dispatch(ctx: Context, fields: dict[str, Any]) -> dict[str, Any]:
    """Admit one background task; raises ``capacity_reached`` at the cap (never queued)."""
    row = ctx.runner.submit("background", background=True, **fields)
    return {"status": "dispatched", "delegation_id": row["id"]}


def stop_foreground_children(ctx: Context, row: dict[str, Any] | None) -> None:
    """Exit hook: when a job ends, its foreground children end too (background ones live on); a job
    back in the queue to resume after a restart (``hermesd.resume``) has not ended."""
    if row is None or row["status"] not in TERMINAL:
        return
    for child in ctx.jobs.list(parent=row["id"], statuses=LIVE, kinds=("delegation",)):
        try:
            ctx.runner.stop(child["id"], "parent_stop")
        except ProtocolError:
            pass


def own_child(ctx: Context, parent_id: str, child_id: Any) -> dict[str, Any]:
    """The row of ``child_id`` if ``parent_id`` started it; else ``not_found`` (whoever else's it is)."""
    row = ctx.jobs.get(child_id) if isinstance(child_id, str) else None
    if row is None or row.get("parent") != parent_id:
        raise ProtocolError("not_found", f"you started no subagent {child_id!r} (list_subagents shows yours)",
                            {"id": child_id})
    return row


def child_view(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    """What an agent sees of one of its children: id, goal, status, model calls, last activity."""
    view = {"id": row["id"], "goal": row.get("goal"), "status": row["status"], "background": bool(row.get("background")),
            "model_calls": row.get("api_calls") or 0, "started_at": row.get("started_at")}
    view["last_activity"] = ctx.runner.doing(row["id"]).activity
    view.update(ctx.runner.activity.describe(row["id"]))
    if row["status"] in jobs_mod.TERMINAL:
        view.update(summary=row.get("summary"), error=row.get("error"))
    return view


def list_children(ctx: Context, parent_id: str, include_ended: bool) -> dict[str, Any]:
    """``child.children``: the agent's children (live ones, or all), oldest first."""
    statuses = None if include_ended else LIVE
    rows = ctx.jobs.list(parent=parent_id, statuses=statuses, limit=200)
    return {"subagents": [child_view(ctx, r) for r in rows]}


def steer_child(ctx: Context, parent_id: str, child_id: Any, message: Any) -> dict[str, Any]:
    """``child.steer``: queue ``message`` for one of the agent's live children."""
    return steer(ctx, own_child(ctx, parent_id, child_id), message, "agent")


STEERABLE = ("delegation", "background")
"""The kinds a person may steer (``steer``): their children read their inbox before each model
call whatever their depth (``child.agent.STEERABLE``, the child's copy of this tuple)."""


def steer(ctx: Context, row: dict[str, Any], message: Any, sender: str) -> dict[str, Any]:
    """Queue ``message`` (a non-empty string of at most :data:`MAX_STEER_BYTES`) from ``sender`` for the
    live job ``row``.  Raises ``bad_request``, ``too_large``, ``invalid_state`` (it ended) and
    ``capacity_reached`` (:data:`hermesd.delegation.inbox.MAX_INBOX` unread)."""
    if not isinstance(message, str) or not message.strip():
        raise ProtocolError("bad_request", "argument 'message' must be a non-empty string", {"field": "message"})
    if len(message.encode()) > MAX_STEER_BYTES:
        raise ProtocolError("too_large", f"message exceeds {MAX_STEER_BYTES} bytes", {"field": "message"})
    if row["status"] in jobs_mod.TERMINAL:
        raise ProtocolError("invalid_state", f"{row['id']} has already ended ({row['status']})",
                            {"id": row["id"], "status": row["status"]})
    waiting = ctx.service(Inbox).put(row["id"], message, sender)
    return {"id": row["id"], "status": row["status"], "delivered": "before its next model call", "unread": waiting}


def stop_child(ctx: Context, parent_id: str, child_id: Any) -> dict[str, Any]:
    """``child.stop_child``: interrupt one of the agent's children (it ends ``interrupted``)."""
    row = own_child(ctx, parent_id, child_id)
    row = ctx.runner.stop(row["id"], "agent_stop", "stopped by the agent that started it")
    return child_view(ctx, row)
