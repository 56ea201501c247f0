"""Delegation: ``delegate`` and ``spawn_parallel`` for people, ``child.delegate`` for agents,
and the job type behind them (kinds ``delegation``: a foreground subagent, and
``background``: one whose completion is delivered as a notification)."""

from __future__ import annotations

from typing import Any

from hermesd.context import Context
from hermesd.delegation import delegate_from_child, stop_foreground_children
from hermesd.handlers.jobs import public
from hermesd.plugin import JobKind, Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op
from hermesd.tasks import new_group, task_fields


class DelegationPlugin(Plugin):
    """Subagents.  A queued foreground delegation ends ``interrupted`` at shutdown
    (whoever waits for it is gone); a queued background one runs after the next
    start (its notification is still owed).  A background job's terminal state
    carries its completion notification (``hermesd.delivery``); when any job
    ends, its foreground children end too."""

    kinds = (JobKind("delegation", "deleg", at_shutdown="stop"), JobKind("background", "bg"))

    def on_terminal(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """A background job's notification, stored with its terminal state."""
        return self.ctx.delivery.on_terminal(row) if row.get("background") else []

    def after_exit(self, row: dict[str, Any] | None) -> None:
        """Any job ended: its foreground children end too (background ones live on)."""
        stop_foreground_children(self.ctx, row)


@op("delegate", work=True)
async def delegate(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Start one subagent for ``goal`` (see ``task_fields`` for the arguments).

    ``background=true``: a background delegation, admitted under
    ``delegation.max_async_children`` — beyond it ``capacity_reached`` (never
    silently queued) unless ``queue=true``.  Resource limits of the child and
    everything it starts, at most the config's ``child_limits``:
    ``memory_limit_mb``, ``cpu_limit_seconds``, ``max_processes``,
    ``max_open_files`` (a child killed by one ends ``failed`` with
    ``exit_reason: resource_limit`` and the limit named in ``error``).
    Returns the job record; for a background job ``status`` is its state and
    ``delegation_id`` its id.
    """
    background = arg(args, "background", bool, False)
    queue = arg(args, "queue", bool, False)
    fields = task_fields(ctx, args)
    kind = "background" if background else "delegation"
    row = ctx.runner.submit(kind, background=background, queue=queue, **fields)
    return public(row)


@op("spawn_parallel", work=True)
async def spawn_parallel(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Start a foreground group of subagents from ``tasks`` (a list of task maps).

    At most ``delegation.max_concurrent_children`` of the group run at once;
    the rest wait their turn.  Returns ``{group, jobs: [record…]}`` in task order.
    """
    tasks = arg(args, "tasks", list)
    limit = ctx.config.delegation.max_tasks_per_call
    if not tasks or len(tasks) > limit:
        raise ProtocolError("bad_request", f"'tasks' must hold 1 to {limit} tasks (delegation.max_tasks_per_call)",
                            {"field": "tasks"})
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise ProtocolError("bad_request", f"tasks[{i}] must be a map", {"field": f"tasks[{i}]"})
    fields = [task_fields(ctx, {**{k: v for k, v in args.items() if k != "tasks"}, **t}) for t in tasks]
    group = new_group()
    rows = [ctx.runner.submit("delegation", pools=(group,), parent=group, **f) for f in fields]
    return {"group": group, "jobs": [public(r) for r in rows]}


@op("child.delegate", child=True)
async def child_delegate(ctx: Context, job: str, args: dict[str, Any]) -> Any:
    """A ``delegate_task`` call of the child's agent: ``tasks`` (list of task maps)
    and ``background``; see :mod:`hermesd.delegation` for the rules and the answer."""
    return await delegate_from_child(ctx, job, args)
