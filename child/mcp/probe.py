"""``python -m child.mcp.probe``: start one MCP server, list its tools, stop it (``hermesctl mcp tools NAME``).

The daemon speaks no MCP (it imports no SDK), so ``mcp.tools`` runs this process
(:mod:`hermesd.mcp.probe`): the server's settings (:meth:`hermesd.mcp.config.Server.to_wire`)
come as JSON on standard input; one JSON object goes to standard output::

    {"name", "state", "error", "seconds", "tools": [{"name", "tool", "offered", "description", "input_schema"}]}

``tool`` is the name the model calls it by (``mcp__NAME__TOOL``), ``offered`` whether the
server's ``tools:`` lets jobs have it.  The server is started as a job's would be
(:class:`child.mcp.client.Servers`: the probe's process group, the environment its settings
name); the probe dies with hermesd (:mod:`child.lifeline`) and takes its group along.  What it
prints is redacted as a job's log is (:mod:`child.redact`: the daemon's secrets, the config's
``secrets:``, the server's own secret ``env`` and ``headers``): a server that fails says why
with the end of its stderr, which may show its environment.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    """Probe the server of standard input; print its tools (see the module doc).  Exit status 0."""
    from child import lifeline, redact

    if os.environ.get("HERMES_DAEMON_PID"):
        lifeline.arm(int(os.environ["HERMES_DAEMON_PID"]))
    from child.mcp.client import Servers
    from hermesd.contract.toolsets import mcp_tool_name

    redact.install()  # what it prints (the server's stderr among its errors) is redacted as a job's log is
    spec = json.loads(sys.stdin.read())
    name = spec["name"]
    began = time.monotonic()
    servers = Servers({name: spec}, cwd=os.getcwd(), log=lambda line: print(line, file=sys.stderr, flush=True),
                      secrets=redact.add)
    try:
        servers.start()
        c = servers.connections[name]
        tools = [{"name": t.name, "tool": mcp_tool_name(name, t.name), "offered": c.server.offers(t.name),
                  "description": (t.description or "").strip(), "input_schema": t.input_schema} for t in c.listed]
        answer = {"name": name, "state": c.state, "error": c.error, "seconds": round(time.monotonic() - began, 3),
                  "tools": tools}
    finally:
        servers.close()
    print(json.dumps(redact.current().data(answer), ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
