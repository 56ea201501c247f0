"""The ``mcp:NAME`` toolsets: an MCP server's tools as tools of the job, ``mcp__NAME__TOOL``.

A job's MCP servers (``JobSpec.mcp_servers``) are started when its run begins
(:func:`open_for`, through :class:`child.mcp.client.Servers`); each tool a server lists and
its config offers (``tools:``) becomes a :class:`child.tools.Tool` named
:func:`hermesd.contract.toolsets.mcp_tool_name`, with the server's description and JSON Schema, in
the toolset ``mcp:NAME`` — offered, traced, recorded in trajectories and counted in
``tool_stats`` like any other.  A call's result is the server's text, structured content
and descriptions of what cannot be shown (:mod:`child.mcp.results`); a result the server
marks ``isError``, and any failure of the server, is a tool error naming it.  A server that
did not start offers no tool; the system prompt says so (:func:`notes`), and a call of one
of its names is told why (:func:`unknown_note`).  No MCP tool is ``repeatable``: one a
restart interrupted gets the "effect unknown" result (:mod:`child.journal`).

This module defines no tool of its own (``TOOLS`` is empty): they are the job's.
"""

from __future__ import annotations

from typing import Any, Callable

from child.tools import Tool, ToolContext, ToolError
from hermesd.contract.toolsets import MCP_TOOL, MCP_TOOLSET, mcp_tool_name

TOOLS: list[Tool] = []
"""The tools every job has: none (an MCP server's tools are its job's, :func:`tools_of`)."""


def open_for(specs: dict[str, dict[str, Any]] | None, *, cwd: str, container: Any = None,
             log: Callable[[str], None] = print, secrets: Callable[[dict[str, str]], None] = lambda _s: None,
             stop: Any = None) -> Any:
    """The job's MCP servers started (:class:`child.mcp.client.Servers`), or None without any;
    ``stop`` (the child's stop flag) cuts the wait for their start short.
    The SDK is imported here: a job without MCP servers never loads it."""
    if not specs:
        return None
    from child.mcp.client import Servers

    servers = Servers(specs, cwd=cwd, container=container, log=log, secrets=secrets)
    servers.start(stop)
    return servers


def tools_of(servers: Any) -> list[Tool]:
    """The tools the ready servers offer, in the servers' order and each server's own."""
    if servers is None:
        return []
    return [_tool(servers, name, tool) for name, c in servers.connections.items() for tool in c.tools]


def _tool(servers: Any, server: str, tool: Any) -> Tool:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
    about = (tool.description or tool.title or "").strip()

    def handler(args: dict, ctx: ToolContext) -> str:
        from child.mcp.client import McpError

        try:
            ok, text = servers.call(server, tool.name, args, stop=ctx.stop, heartbeat=ctx.heartbeat)
        except McpError as exc:
            raise ToolError(str(exc)) from None
        if not ok:
            raise ToolError(f"MCP server {server!r} reports an error: {text}")
        return text

    return Tool(mcp_tool_name(server, tool.name), MCP_TOOLSET + server,
                f"{about}\n(tool {tool.name} of the MCP server {server})".strip(), schema, handler)


def notes(servers: Any) -> list[str]:
    """A line for each server that is not ready (the system prompt's): its name and why."""
    if servers is None:
        return []
    return [f"- MCP server {name} is unavailable: {c.error or c.state}; its tools are not offered"
            for name, c in servers.connections.items() if c.state != "ready"]


def unknown_note(tool: str, servers: Any) -> str:
    """Why ``tool``, a name of the form ``mcp__NAME__TOOL``, is not offered when its server
    ``NAME`` is not ready ('' otherwise): the end of an unknown tool's error."""
    if servers is None or not tool.startswith(MCP_TOOL):
        return ""
    name = tool[len(MCP_TOOL):].partition("__")[0]
    c = servers.connections.get(name)
    return f"; MCP server {name!r} {c.state}: {c.error}" if c is not None and c.state != "ready" else ""
