"""The toolsets and their tools, and the roles a child may have.

A leaf (standard library only) of :mod:`hermesd.contract`: :data:`TOOLSETS` (the one list of
toolsets and tools; the child's registry, :mod:`child.tools.registry`, checks itself against it
at import), :data:`EXPLICIT_ONLY`, :data:`TOOL_NAMES`; the MCP servers' toolsets and tools
(:data:`MCP_TOOLSET`, :data:`MCP_TOOL`, :func:`mcp_tool_name`); :data:`ROLES` and :data:`WORKER_ROLE`.
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

MCP_TOOLSET = "mcp:"
"""The prefix of a toolset that is an MCP server: ``mcp:NAME`` offers the tools of the server
``NAME`` of ``mcp_servers:`` (:mod:`hermesd.mcp.config`); ``all`` and ``*`` name none."""
MCP_TOOL = "mcp__"
"""The prefix of an MCP server's tools as the model sees them: ``mcp__NAME__TOOL`` (Claude Code's
form), :func:`mcp_tool_name`."""


def mcp_server_of(toolset: str) -> str | None:
    """The server named by toolset ``mcp:NAME``; None for any other toolset."""
    return toolset[len(MCP_TOOLSET):] if toolset.startswith(MCP_TOOLSET) else None


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__SERVER__TOOL``: the name the model calls ``tool`` of ``server`` by; characters a
    provider refuses in a tool name (``[A-Za-z0-9_-]`` only, at most 128) become ``_``."""
    name = MCP_TOOL + server + "__" + "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in tool)
    return name[:128]


ROLES = ("leaf", "orchestrator")
"""Roles a delegating agent may give a subagent: a ``leaf`` cannot delegate further."""
WORKER_ROLE = "kanban_worker"
"""The ``role`` of a Kanban worker job: its child offers the Kanban worker tools only."""
