"""The ``delegation`` toolset: ``delegate_task`` and its aliases ``spawn_agent``
and ``spawn_parallel``, and the control of the subagents an agent
started: ``list_subagents``, ``steer_subagent``, ``stop_subagent``.

The child never starts a subagent itself: it sends ``child.delegate`` to hermesd,
which checks the caps and the depth, runs each task as a child process of its
own and answers with the results in task order (or, for ``background``, with
``{"status": "dispatched", "delegation_id": ...}`` at once).  A foreground call
waits as long as the subagents run.

Top-level ``context``, ``toolsets``, ``role``, ``model``, ``image`` and ``worktree`` apply to every task
that does not set its own.  A task may say ``prompt`` instead of ``goal`` (the
shape of Hermes' ``spawn_parallel``).  ``timeout_seconds`` sets an opt-in
wall-clock limit (by default a subagent runs as long as it shows activity);
``output_schema`` (a JSON Schema) makes the subagent's final answer JSON that
validates against it.

An agent reaches only its own subagents (``child.children``, ``child.steer``,
``child.stop_child``); any other id is ``not_found``.  A steer message is read
by the subagent before its next model call; a stopped subagent ends
``interrupted`` with its partial output.
"""

from __future__ import annotations

import json

from child.tools import Tool, ToolContext, ToolError, daemon_call, schema

MAX_TASKS = 8
"""Most tasks one call may delegate."""

SHARED = ("context", "toolsets", "role", "model", "timeout_seconds", "output_schema", "image", "max_cost_usd",
          "max_tokens", "worktree")
"""Task fields that may be given once for every task of a call."""

_FIELDS = {
    "context": {"type": "string", "description": "Background the subagent needs: facts, paths, constraints."},
    "toolsets": {"type": "array", "items": {"type": "string"},
                 "description": "Toolsets for the subagent (within your own); default: your toolsets."},
    "role": {"type": "string", "description": "Role of the subagent: leaf (default) or orchestrator."},
    "model": {"type": "string", "description": "Model for the subagent; default: the configured one."},
    "timeout_seconds": {"type": "number", "exclusiveMinimum": 0,
                        "description": "Wall-clock limit in seconds (default: none; a subagent that shows no "
                                       "activity for a long time is stopped anyway)."},
    "output_schema": {"type": "object",
                      "description": "JSON Schema the subagent's final answer must validate against; "
                                     "its summary is then that JSON."},
    "image": {"type": "string", "minLength": 1,
              "description": "Container image the subagent's terminal commands run in (its working directory "
                             "mounted at /workspace); default: the configured terminal."},
    "worktree": {"type": "boolean",
                 "description": "Run the subagent in a new git worktree of your repository, on its own branch "
                                "hermes/ID, so that parallel subagents never edit the same checkout; its changes "
                                "stay on that branch (the result names it). Default: the configuration's."},
    "max_cost_usd": {"type": "number", "exclusiveMinimum": 0,
                     "description": "Budget in USD of the subagent and all it delegates: it is stopped once spent."},
    "max_tokens": {"type": "integer", "minimum": 1,
                   "description": "Budget in tokens (input and output) of the subagent and all it delegates."},
}
_GOAL = {"type": "string", "minLength": 1, "description": "What the subagent must achieve, self-contained."}
_TASK = schema({"goal": _GOAL, "prompt": {**_GOAL, "description": "Same as goal."}, **_FIELDS})
_TASKS = {"type": "array", "minItems": 1, "items": _TASK,
          "description": f"Several tasks run in parallel (at most {MAX_TASKS}); results come back in order."}
_BACKGROUND = {"type": "boolean",
               "description": "Return at once with a delegation id; the result arrives later as a new turn."}


def _tasks(args: dict) -> list[dict]:
    """The call's task list, each task with its goal and the shared fields filled in."""
    if ("goal" in args) == ("tasks" in args):
        raise ToolError("give either 'goal' (one task) or 'tasks' (a list), not both or neither")
    raw = args["tasks"] if "tasks" in args else [{"goal": args["goal"]}]
    if len(raw) > MAX_TASKS:
        raise ToolError(f"{len(raw)} tasks given, at most {MAX_TASKS} per call; "
                        "split them over several calls")
    tasks = []
    for i, task in enumerate(raw):
        goal = task.get("goal") or task.get("prompt")
        if not goal:
            raise ToolError(f"tasks[{i}] has no 'goal'")
        merged = {"goal": goal, **{k: args[k] for k in SHARED if k in args},
                  **{k: task[k] for k in SHARED if k in task}}
        tasks.append(merged)
    return tasks


def format_answer(tasks: list[dict], answer) -> str:
    """The tool result text (JSON) of the daemon's answer: a background
    dispatch as it is; per-task results as ``{"results": [...]}``, each with its
    ``task`` index and ``goal`` in front of the daemon's fields (status, summary,
    api_calls, duration_seconds, tokens, trace)."""
    if isinstance(answer, list):
        answer = {"results": [{"task": i, "goal": task["goal"], **(result or {})}
                              for i, (task, result) in enumerate(zip(tasks, answer))]}
    return json.dumps(answer, ensure_ascii=False, default=str)


def delegate(args: dict, ctx: ToolContext) -> str:
    """Handler of all three tools: forward the tasks as ``child.delegate`` and format the answer.

    Raises :class:`ToolError` for a malformed task list, more than
    :data:`MAX_TASKS` tasks, a depth beyond ``ctx.max_spawn_depth``, or an
    error from the daemon (``capacity_reached``, ``depth_limit``, ...).
    """
    tasks = _tasks(args)
    if ctx.depth + 1 > ctx.max_spawn_depth:
        raise ToolError(f"depth_limit: this agent is at delegation depth {ctx.depth} and "
                        f"delegation.max_spawn_depth is {ctx.max_spawn_depth}; do the work yourself")
    background = bool(args.get("background", False))
    answer = daemon_call(ctx, "child.delegate", timeout=None, tasks=tasks, background=background)
    return format_answer(tasks, answer)


_ID = {"type": "string", "minLength": 1, "description": "The subagent's id (deleg_… or bg_…)."}


def list_subagents(args: dict, ctx: ToolContext) -> str:
    """Handler of ``list_subagents``: this agent's running and queued subagents (``child.children``)."""
    answer = daemon_call(ctx, "child.children", all=bool(args.get("all", False)))
    return json.dumps(answer, ensure_ascii=False, default=str)


def steer_subagent(args: dict, ctx: ToolContext) -> str:
    """Handler of ``steer_subagent``: queue ``message`` for subagent ``id`` (``child.steer``)."""
    return json.dumps(daemon_call(ctx, "child.steer", id=args["id"], message=args["message"]), ensure_ascii=False)


def stop_subagent(args: dict, ctx: ToolContext) -> str:
    """Handler of ``stop_subagent``: interrupt subagent ``id`` (``child.stop_child``)."""
    return json.dumps(daemon_call(ctx, "child.stop_child", id=args["id"]), ensure_ascii=False, default=str)


TOOLS = [
    Tool("delegate_task", "delegation",
         "Hand work to subagents, each an isolated agent with its own context. Give `goal` for one task "
         f"or `tasks` for up to {MAX_TASKS} run in parallel. With `background` the call returns at once and "
         "the result arrives later as a new turn; otherwise it waits and returns every result in order.",
         schema({"goal": _GOAL, "tasks": _TASKS, **_FIELDS, "background": _BACKGROUND}),
         delegate),
    Tool("spawn_agent", "delegation",
         "Start one subagent on a goal (same as delegate_task with `goal`).",
         schema({"goal": _GOAL, **_FIELDS, "background": _BACKGROUND}, required=("goal",)),
         delegate),
    Tool("spawn_parallel", "delegation",
         f"Start up to {MAX_TASKS} subagents in parallel (same as delegate_task with `tasks`); results "
         "come back in task order.",
         schema({"tasks": _TASKS, **_FIELDS, "background": _BACKGROUND}, required=("tasks",)),
         delegate),
    Tool("list_subagents", "delegation",
         "List the subagents you started that are still queued or running (with `all`: ended ones too): "
         "id, goal, status, model calls, and their last activity and when it was.",
         schema({"all": {"type": "boolean", "description": "Include subagents that have ended."}}),
         list_subagents, repeatable=True),
    Tool("steer_subagent", "delegation",
         "Send a message to one of your running subagents; it reads it before its next step "
         "(e.g. to narrow its task or tell it what you learned).",
         schema({"id": _ID, "message": {"type": "string", "minLength": 1, "description": "What to tell it."}},
                required=("id", "message")),
         steer_subagent),
    Tool("stop_subagent", "delegation",
         "Stop one of your subagents: it ends `interrupted` and its partial output comes back.",
         schema({"id": _ID}, required=("id",)),
         stop_subagent),
]
