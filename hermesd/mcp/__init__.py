"""MCP servers for jobs, the daemon's side (no job kind; the client is the child's, :mod:`child.mcp`).

* :mod:`hermesd.mcp.config` — ``mcp_servers:`` in ``config.yaml`` (and in a Kanban profile):
  each server's transport, timeouts, tool allow-list; the ``mcp:NAME`` toolsets checked;
* :mod:`hermesd.mcp.ops` — the plugin: a job's ``mcp:NAME`` toolsets checked at admission and
  the servers' settings put in its spec (``JobSpec.mcp_servers``); ``mcp.list``, ``mcp.tools``.

This module imports nothing.
"""
