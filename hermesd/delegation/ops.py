"""Delegation: ``delegate``, ``spawn_parallel`` and ``retry`` for people; ``child.delegate`` and
the control of an agent's own subagents (``child.children``, ``child.steer``,
``child.stop_child``, ``child.inbox``) for agents; and the job type behind them (kinds
``delegation``: a foreground subagent, and ``background``: one whose completion is
delivered as a notification)."""

from __future__ import annotations

from typing import Any

from hermesd import idempotency
from hermesd.config import Config
from hermesd.context import Context
from hermesd.contract.states import TERMINAL
from hermesd.delegation import inbox, notifications
from hermesd.subagents import SubagentRules
from hermesd.delegation.delivery import Delivery
from hermesd.delegation.service import (STEERABLE, delegate_from_child, list_children, steer, steer_child, stop_child,
                                        stop_foreground_children)
from hermesd.handlers.jobs import submitted
from hermesd.jobs import AdmissionPool, JobKind
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op
from hermesd.delegation.tasks import new_group, task_fields


ASYNC = AdmissionPool(
    "async", "{running} background delegations are already running ({setting} = {limit}); run this task in the "
    "foreground instead, wait for one to finish (hermesctl wait ID), or pass --queue to wait for a free slot",
    "delegation.max_async_children")
"""Background delegations hold a slot of ``async`` from admission: beyond ``delegation.max_async_children``
a new one is refused (``capacity_reached``) unless it asks to queue."""

MAX_ACK = 1000
"""Most message ids one ``child.inbox`` acknowledges."""


class DelegationPlugin(SubagentRules):
    """Subagents.  A queued foreground delegation ends ``interrupted`` at shutdown
    (whoever waits for it is gone); a queued background one runs after the next
    start (its notification is still owed).  A background job's terminal state
    carries its completion notification (``hermesd.delegation.delivery``); when any job
    ends, its foreground children end too, and the steer messages still waiting for it go."""

    events = {
        "async_delegation": "A background delegation ended (any terminal state): the completion notification. "
        "`data`: `delegation_id`, `goal`, `context`, `toolsets`, `role`, `model`, `status`, `exit_reason`, "
        "`api_calls`, `duration_seconds`, `dispatched_at`, `completed_at`, `result`, `error`, `session`, `worktree` "
        "(its git worktree, as the job record has it, or null), and "
        "`block`, the rendered self-contained text.",
    }

    kinds = (JobKind("delegation", "deleg", at_shutdown="stop", at_restart="journal"),
             JobKind("background", "bg", at_restart="journal", pool=ASYNC))
    migrations = {**notifications.MIGRATIONS, **inbox.MIGRATIONS}

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.inbox = ctx.provide(inbox.Inbox(ctx.store))  # steer messages waiting for their subagent
        self.delivery = ctx.provide(Delivery(ctx.store, ctx.events))

    def on_terminal(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """A background job's notification, stored with its terminal state; the steer messages
        no one will read removed in the same transaction."""
        self.inbox.forget(row["id"])
        return self.delivery.on_terminal(row) if row.get("background") else []

    def configure(self, config: Config) -> None:
        """The pools of delegations: ``async`` (background jobs, ``delegation.max_async_children``) and
        ``group:<id>`` (one foreground parallel group, ``delegation.max_concurrent_children``)."""
        self.ctx.scheduler.set_limit(ASYNC.name, config.delegation.max_async_children)
        self.ctx.scheduler.prefix_limits["group:"] = config.delegation.max_concurrent_children

    def status(self) -> dict[str, Any]:
        """``pending_notifications``: how many completions wait for their session."""
        return {"pending_notifications": self.delivery.notifications.pending_count()}

    def after_exit(self, row: dict[str, Any] | None) -> None:
        """Any job ended: its foreground children end too (background ones live on)."""
        stop_foreground_children(self.ctx, row)


@op("delegate", work=True)
async def delegate(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Start one subagent for ``goal`` (see ``task_fields`` for the arguments: ``timeout_seconds``,
    ``output_schema``, ``env`` and ``after`` among them).  While the queue is paused the job is
    accepted and waits ``queued`` (the reply has ``queue_paused: true``); with ``after`` it
    starts once those jobs completed, and fails naming the one that did not.

    ``background=true``: a background delegation, admitted under
    ``delegation.max_async_children`` — beyond it ``capacity_reached`` (never
    silently queued) unless ``queue=true``.  Resource limits of the child and
    everything it starts, at most the config's ``child_limits``:
    ``memory_limit_mb``, ``cpu_limit_seconds``, ``max_processes``,
    ``max_open_files`` (a child killed by one ends ``failed`` with
    ``exit_reason: resource_limit`` and the limit named in ``error``).
    Returns the job record; for a background job ``status`` is its state and
    ``delegation_id`` its id.  ``idempotency_key``: a repeat of a request with the same
    key gets the job the first one made, with ``repeat: true``;
    the key with other arguments is ``bad_request`` (:mod:`hermesd.idempotency`).
    """
    key = idempotency.key_of(args, "delegate")
    first = idempotency.earlier(ctx.store, key)
    if first is not None:
        return idempotency.repeat(submitted(ctx, first))
    background = arg(args, "background", bool, False)
    queue = arg(args, "queue", bool, False)
    fields = task_fields(ctx, args)
    kind = "background" if background else "delegation"
    row = ctx.runner.submit(kind, background=background, queue=queue, idempotency_key=key, **fields)
    return submitted(ctx, row)


@op("spawn_parallel", work=True)
async def spawn_parallel(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Start a foreground group of subagents from ``tasks`` (a list of task maps).

    At most ``delegation.max_concurrent_children`` of the group run at once;
    the rest wait their turn.  Returns ``{group, jobs: [record…]}`` in task order.
    ``idempotency_key``: a repeat gets the group the first request made, with ``repeat: true``;
    the key with other arguments is ``bad_request``.
    """
    key = idempotency.key_of(args, "spawn_parallel")
    first = idempotency.earlier(ctx.store, key)
    if first is not None:
        rows = ctx.jobs.list(parent=first["parent"])
        return idempotency.repeat({"group": first["parent"], "jobs": [submitted(ctx, r) for r in rows]})
    tasks = arg(args, "tasks", list)
    limit = ctx.config.delegation.max_tasks_per_call
    if not tasks or len(tasks) > limit:
        raise ProtocolError("bad_request", f"'tasks' must hold 1 to {limit} tasks (delegation.max_tasks_per_call)",
                            {"field": "tasks"})
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise ProtocolError("bad_request", f"tasks[{i}] must be a map", {"field": f"tasks[{i}]"})
    fields = [task_fields(ctx, {**{k: v for k, v in args.items() if k not in ("tasks", idempotency.ARG)}, **t})
              for t in tasks]
    group = new_group()
    rows = [ctx.runner.submit("delegation", pools=(group,), parent=group, idempotency_key=key if i == 0 else None, **f)
            for i, f in enumerate(fields)]
    return {"group": group, "jobs": [submitted(ctx, r) for r in rows]}


@op("child.delegate", child=True)
async def child_delegate(ctx: Context, job: str, args: dict[str, Any]) -> Any:
    """A ``delegate_task`` call of the child's agent: ``tasks`` (list of task maps)
    and ``background``; see :mod:`hermesd.delegation.service` for the rules and the answer."""
    return await delegate_from_child(ctx, job, args)


RETRY_COLUMNS = ("goal", "context", "toolsets", "role", "model", "provider", "cwd", "depth", "session")
"""The columns a retry copies (with the spec, less its ``after``)."""


@op("retry", work=True)
async def retry(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Run ended delegation ``id`` again: a new job of the same kind with the same goal, context,
    toolsets, role, model, provider, working directory, environment and limits (its ``after``
    links are not copied: it starts now; a background one waits for a slot), with ``retry_of``
    naming the old job.  ``not_found``; ``invalid_state`` while the old job runs;
    ``bad_request`` for a job of another kind (a batch resumes: ``batch run --resume``).
    Returns the new job's record."""
    old = ctx.jobs.require(arg(args, "id", str))
    if old["kind"] not in {kind.name for kind in DelegationPlugin.kinds}:
        raise ProtocolError("bad_request", f"{old['id']} is a {old['kind']} job; retry runs delegations again",
                            {"id": old["id"], "kind": old["kind"]})
    if old["status"] not in TERMINAL:
        raise ProtocolError("invalid_state", f"{old['id']} is still {old['status']}; retry runs an ended job",
                            {"id": old["id"], "status": old["status"]})
    spec = {k: v for k, v in (old.get("spec") or {}).items() if k != "after"}
    if spec.get("secret_values"):  # removed when it ended (hermesd.secret_values)
        raise ProtocolError("bad_request", f"{old['id']} was given the values of {', '.join(spec['secret_values'])}, "
                            "which are not kept once a job ends: delegate it again with them",
                            {"id": old["id"], "names": spec["secret_values"]})
    row = ctx.runner.submit(old["kind"], background=bool(old.get("background")), queue=True,
                            spec={**spec, "retry_of": old["id"]}, **{k: old.get(k) for k in RETRY_COLUMNS})
    return submitted(ctx, row)


@op("steer")
async def steer_job(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """A person's ``message`` to the live delegation ``id`` (kinds ``delegation``, ``background``;
    at most 64 KiB): it reads it before its next model call, as a message from a person (a
    subagent's own agent steers it with ``steer_subagent``).  Returns ``{id, status, delivered,
    unread}``.  ``not_found``; ``bad_request`` for another kind (a session's turn: ``session.send``;
    a Kanban worker: ``kanban.comment``); ``invalid_state`` once it ended; ``capacity_reached``
    while 32 messages wait unread."""
    row = ctx.jobs.require(arg(args, "id", str))
    if row["kind"] not in STEERABLE:
        raise ProtocolError("bad_request", f"{row['id']} is a {row['kind']} job; steer reaches delegations "
                            "(a session: hermesctl send; a Kanban task: hermesctl kanban comment)",
                            {"id": row["id"], "kind": row["kind"]})
    return steer(ctx, row, args.get("message"), "person")


@op("child.inbox", child=True)
async def child_inbox(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """The messages sent to this child (``steer``, ``child.steer``) not yet acknowledged:
    ``{messages: [text…], senders: [sender…], ids: [id…]}`` (``agent``: the agent that started it;
    ``person``: the ``steer`` op).  A child asks before each model call, with ``ack``: the ids
    (at most 1,000) of the messages it has written to its journal since, which are removed
    first; any other is answered again, so a message taken by a child that died before it
    journaled it reaches the child that resumes the job (:mod:`hermesd.delegation.inbox`)."""
    ack = arg(args, "ack", list, [])
    if len(ack) > MAX_ACK or not all(isinstance(i, int) and not isinstance(i, bool) for i in ack):
        raise ProtocolError("bad_request", f"argument 'ack' must be a list of at most {MAX_ACK} message ids "
                            "(integers)", {"field": "ack"})
    waiting = ctx.service(inbox.Inbox).fetch(job, ack)
    return {"messages": [m["text"] for m in waiting], "senders": [m["sender"] for m in waiting],
            "ids": [m["id"] for m in waiting]}


@op("child.children", child=True)
async def child_children(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """The child's own subagents (live ones; ``all=true``: ended ones too): ``{subagents: [{id, goal,
    status, background, model_calls, started_at, last_activity, last_activity_at, idle_seconds}…]}``."""
    return list_children(ctx, job, arg(args, "all", bool, False))


@op("child.steer", child=True)
async def child_steer(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Send ``message`` to the child's own subagent ``id``; it reads it before its next model call.
    ``not_found`` for an id that is not its own subagent; ``invalid_state`` once that one ended."""
    return steer_child(ctx, job, args.get("id"), args.get("message"))


@op("child.stop_child", child=True)
async def child_stop_child(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Stop the child's own subagent ``id``: it ends ``interrupted`` with its partial output.
    ``not_found`` for an id that is not its own subagent; ``invalid_state`` once that one ended."""
    return stop_child(ctx, job, args.get("id"))
