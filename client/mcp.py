"""``hermesctl mcp list`` and ``hermesctl mcp tools NAME``: the MCP servers of ``mcp_servers:`` and
the tools each offers (the daemon's ``mcp.list`` and ``mcp.tools`` ops say what each does)."""

from __future__ import annotations

import sys
from typing import Any

import click

from client import render
from client.common import conn, is_json, json_option, out, print_all, working_dir


def server_line(s: dict[str, Any]) -> str:
    """One server: its toolset, transport, whether enabled, what it runs or reaches, its allow-list."""
    tools = "all tools" if s.get("tools") is None else "tools " + (", ".join(s["tools"]) or "none")
    if s.get("exclude"):
        tools += " but " + ", ".join(s["exclude"])
    return (f"{s['toolset']:<20} {s['transport']:<5} {'enabled' if s['enabled'] else 'disabled':<8} "
            f"{s['target']}\n    {tools}; a call may take {s['timeout_seconds']:g}s, "
            f"its start {s['connect_timeout_seconds']:g}s")


@click.group("mcp")
def mcp_group() -> None:
    """MCP servers (mcp_servers: in config.yaml); a job uses one with the toolset mcp:NAME."""


@mcp_group.command("list")
@json_option
def list_command() -> None:
    """The MCP servers of the config in force."""
    print_all(conn().call("mcp.list")["servers"], server_line, "no MCP servers (mcp_servers: in config.yaml)")


@mcp_group.command("tools")
@json_option
@click.argument("name")
def tools_command(name: str) -> None:
    """Start MCP server NAME and list the tools it offers (as the model sees them: mcp__NAME__TOOL)."""
    answer = conn().call("mcp.tools", name=name, cwd=working_dir(), _timeout=max(conn().timeout, 600.0))
    if is_json():
        render.emit_json(answer)
    else:
        for tool in answer["tools"]:
            about = " ".join((tool.get("description") or "").split())
            out(f"{tool['tool']}" + ("" if tool["offered"] else "  (not offered: tools: of its config)")
                + (f"\n    {about[:200]}" if about else ""))
        if answer["state"] == "ready":
            out(f"{render.counted(len(answer['tools']), 'tool')} from MCP server {name} (started in {answer['seconds']:g}s)")
    if answer["state"] != "ready":
        print(f"hermesctl mcp tools: MCP server {name} {answer['state']}: {answer.get('error')}", file=sys.stderr)
        sys.exit(1)


COMMANDS = (mcp_group,)
