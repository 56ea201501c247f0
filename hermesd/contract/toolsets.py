"""The toolsets and their tools, and the roles a child may have.

A leaf (standard library only) of :mod:`hermesd.contract`: :data:`TOOLSETS` (the one list of
toolsets and tools; the child's registry, :mod:`child.tools.registry`, checks itself against it
at import), :data:`EXPLICIT_ONLY`, :data:`TOOL_NAMES`; :data:`ROLES` and :data:`WORKER_ROLE`.
"""

from __future__ import annotations

TOOLSETS: dict[str, tuple[str, ...]] = {
    "terminal": ("terminal",),
    "file": ("read_file", "write_file", "patch_file", "list_files"),
    "web": ("web_extract", "web_search"),
    "delegation": ("delegate_task", "spawn_agent", "spawn_parallel", "list_subagents", "steer_subagent",
                   "stop_subagent"),
    "kanban": ("kanban_create", "kanban_link", "kanban_list", "kanban_show", "kanban_comment", "kanban_unblock",
               "kanban_my_task", "kanban_complete", "kanban_block", "kanban_heartbeat"),
}
"""Toolset name → the names of its tools, in the order the model is offered them: the one
list of both (the tools themselves are the child's, :mod:`child.tools.registry`, which
checks itself against this at import)."""
EXPLICIT_ONLY = ("kanban",)
"""Toolsets that ``all`` and ``*`` leave out; only their literal name enables them."""
TOOL_NAMES = tuple(sorted(name for names in TOOLSETS.values() for name in names))
"""Every tool a child can have, sorted (the stable key set of ``tool_stats``)."""


ROLES = ("leaf", "orchestrator")
"""Roles a delegating agent may give a subagent: a ``leaf`` cannot delegate further."""
WORKER_ROLE = "kanban_worker"
"""The ``role`` of a Kanban worker job: its child offers the Kanban worker tools only."""
