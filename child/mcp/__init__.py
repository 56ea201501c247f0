"""The child as an MCP client (the official ``mcp`` SDK): its job's servers, started and called.

* :mod:`child.mcp.client` — the servers of one job on a loop of their own: start, list, call,
  stop, each failure an error naming the server;
* :mod:`child.mcp.stdio` — a stdio server in the child's process group, with only the
  environment its config names;
* :mod:`child.mcp.results` — a tool call's result as the text of a tool result.

The tools themselves are :mod:`child.tools.mcp`'s.  Nothing here is imported by a job without
MCP servers (the SDK costs its import time only where it is used).
"""
