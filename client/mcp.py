"""``hermesctl mcp list`` and ``hermesctl mcp tools NAME``: the MCP servers of ``mcp_servers:`` and
the tools each offers (the daemon's ``mcp.list`` and ``mcp.tools`` ops say what each does)."""

from __future__ import annotations

import sys
from typing import Any

import click

from client import render
from client.common import conn, is_json, json_option, out, print_all, timeout_given, working_dir
from hermesd.protocol import EXIT_CODES

ANSWER_GRACE_SECONDS = 5.0
"""Seconds the client waits beyond ``--timeout`` for the daemon's answer that the probe ran out of
it (the daemon stops the probe at ``--timeout`` and says so; this is that answer's way back)."""
LONGEST_PROBE_SECONDS = 600.0
"""Seconds the client waits for the answer without ``--timeout`` (the daemon's own limit of a probe,
its server's ``connect_timeout_seconds`` and a margin, comes first but for a server given longer)."""


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
    """Start MCP server NAME and list the tools it offers (as the model sees them: mcp__NAME__TOOL).
    The global --timeout bounds it (the server is stopped then; exit 9); without it, the server's
    connect_timeout_seconds (and 15 s for the probe itself) do."""
    given = timeout_given()
    args = {"name": name, "cwd": working_dir(), **({"timeout_seconds": given} if given is not None else {})}
    wait = given + ANSWER_GRACE_SECONDS if given is not None else LONGEST_PROBE_SECONDS
    answer = conn().call("mcp.tools", _timeout=wait, **args)
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
        timed_out = answer["state"] == "timed_out"  # the error says within what: "did not list its tools within 3s …"
        said = answer.get("error") if timed_out else f"{answer['state']}: {answer.get('error')}"
        print(f"hermesctl mcp tools: MCP server {name} {said}", file=sys.stderr)
        sys.exit(EXIT_CODES["timeout"] if timed_out else 1)


COMMANDS = (mcp_group,)
