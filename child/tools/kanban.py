"""The ``kanban`` toolset: schemas, and forwarding to hermesd.

The board lives in the daemon.  Every tool here sends
``child.call {op: "kanban.<verb>", args}`` (the verb is the tool name without
``kanban_``) and returns the daemon's answer as JSON; the daemon checks who may
do what (a worker only touches its own task).  Orchestrator tools create, link,
list, show, comment on and unblock tasks; worker tools read the worker's own task
and complete, block or heartbeat it.  The toolset is only enabled by its literal
name: ``all`` and ``*`` never include it.
"""

from __future__ import annotations

import json

from child.tools import Tool, ToolContext, daemon_call, schema
from hermesd.contract.states import KanbanStatus
from hermesd.contract.toolsets import WORKER_ROLE

WORKER_TOOLS = ("kanban_my_task", "kanban_complete", "kanban_block", "kanban_comment", "kanban_heartbeat")
ORCHESTRATOR_TOOLS = ("kanban_create", "kanban_link", "kanban_list", "kanban_show", "kanban_comment",
                      "kanban_unblock")


def offered(name: str, role: str | None) -> bool:
    """Whether kanban tool ``name`` is offered to an agent of ``role``: a worker
    gets the worker tools, every other agent the orchestrator tools."""
    return name in (WORKER_TOOLS if role == WORKER_ROLE else ORCHESTRATOR_TOOLS)

_ID = {"type": "string", "minLength": 1, "description": "Task id."}
_TEXT = {"type": "string", "minLength": 1}


def forward(name: str):
    """The handler of tool ``name``: send ``kanban.<verb>`` with the tool's
    arguments and return the answer as JSON.  Daemon errors become :class:`ToolError`."""
    op = "kanban." + name.removeprefix("kanban_")

    def handler(args: dict, ctx: ToolContext) -> str:
        return json.dumps(daemon_call(ctx, "child.call", op=op, args=dict(args)), ensure_ascii=False, default=str)

    handler.__doc__ = f"Forward ``{name}`` to hermesd as ``{op}``."
    return handler


def _tool(name: str, description: str, properties: dict, required: tuple[str, ...] = ()) -> Tool:
    return Tool(name, "kanban", description, schema(properties, required), forward(name))


TOOLS = [
    # orchestrator tools
    _tool("kanban_create", "Create a task on the board for a worker profile. It becomes ready when all its "
          "parents are done.",
          {"title": {**_TEXT, "description": "Short title."},
           "body": {"type": "string", "description": "What the worker must do, self-contained."},
           "assignee": {**_TEXT, "description": "Worker profile that will run it (kanban_list shows the profiles "
                        "and what each is good at)."},
           "parents": {"type": "array", "items": {"type": "string"}, "description": "Ids of tasks it waits for."},
           "priority": {"type": "integer", "description": "Higher runs first (default 0)."},
           "board": {**_TEXT, "description": "Board name (default: the default board)."}},
          ("title", "assignee")),
    _tool("kanban_link", "Make task `child` wait for task `parent`.",
          {"parent": _ID, "child": _ID}, ("parent", "child")),
    _tool("kanban_list", "List tasks on the board, optionally by status or assignee, and the worker profiles "
          "(name and what each is good at) that tasks can be assigned to.",
          {"status": {"type": "string", "enum": [s.value for s in KanbanStatus]}, "assignee": _TEXT, "board": _TEXT}),
    _tool("kanban_show", "Show one task with its comments, result and artifacts.", {"id": _ID}, ("id",)),
    _tool("kanban_comment", "Add a comment to a task.", {"id": _ID, "text": _TEXT}, ("id", "text")),
    _tool("kanban_unblock", "Move a blocked task back to the queue, optionally with a note for the worker.",
          {"id": _ID, "note": {"type": "string"}}, ("id",)),
    # worker tools
    _tool("kanban_my_task", "Show the task you were started for.", {}),
    _tool("kanban_complete", "Finish your task with its result and the artifacts you produced.",
          {"result": {**_TEXT, "description": "What was done, and the answer."},
           "artifacts": {"type": "array", "items": {"type": "string"},
                         "description": "Paths or URLs of what you produced."}},
          ("result",)),
    _tool("kanban_block", "Stop working on your task because something is missing; say what.",
          {"reason": _TEXT}, ("reason",)),
    _tool("kanban_heartbeat", "Tell the board you are still working on your task (keeps your claim).",
          {"note": {"type": "string"}}),
]
