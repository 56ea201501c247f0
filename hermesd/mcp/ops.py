"""MCP servers for any job: the plugin (no job kind) and the ``mcp.*`` ops.

A job picks servers by its toolsets ``mcp:NAME`` (``--toolsets terminal,mcp:time``,
``delegate_task``'s toolsets, a batch's distribution, a Kanban profile).  At admission
(:meth:`McpPlugin.admit`) each must name an enabled server of ``mcp_servers:`` — or one of
the job's own (a Kanban profile's, in its spec's ``own_mcp_servers``) — else the request is
refused naming it; at ``child.hello`` (:meth:`McpPlugin.any_spec`) the spec's
``mcp_servers`` gets their settings; the child's report of how each was (``JobResult.mcp``) is kept
with the job (:meth:`McpPlugin.any_result`), which ``result`` and ``ps`` show.  The daemon never speaks MCP (it imports no SDK): the
child is the client (:mod:`child.mcp`).  ``mcp.list`` answers the configured servers, ``mcp.tools`` a
server's tools (asked of it by a probe process, :mod:`hermesd.mcp.probe`).
"""

from __future__ import annotations

import os
from typing import Any

from hermesd.context import Context
from hermesd.contract.toolsets import mcp_server_of
from hermesd.contract.wire import JobResult, JobSpec
from hermesd.mcp.config import Server, servers, unknown_toolsets
from hermesd.plugin import Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op

OWN = "own_mcp_servers"
"""The key of a job's spec holding servers of its own (a Kanban profile's), ``{NAME: settings}``."""


def known_to(config: Any, spec: dict[str, Any] | None) -> dict[str, Server]:
    """The servers a job may use: the config's, then those of its own spec (which win)."""
    own = {name: Server.from_wire(entry) for name, entry in ((spec or {}).get(OWN) or {}).items()}
    return {**config.mcp(), **own}


class McpPlugin(Plugin):
    """MCP servers, the daemon's side: a plugin without a job kind whose hooks see every job."""

    on_demand = ("hermesd.mcp.probe",)

    @classmethod
    def warm_modules(cls, config: Any) -> tuple[str, ...]:
        """With a server configured, the child's MCP client (and so the SDK) is imported by the
        zygote once, not by each child that uses a server (about 1.5 s of a loaded machine)."""
        return ("child.mcp.client",) if any(s.enabled for s in config.mcp().values()) else ()

    def admit(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        """Refuse (``bad_request``) a job whose ``mcp:NAME`` toolset names no enabled server."""
        bad = unknown_toolsets(list(fields.get("toolsets") or []), known_to(self.ctx.config, fields.get("spec")))
        if bad:
            raise ProtocolError("bad_request", "; ".join(bad), {"field": "toolsets"})

    def any_spec(self, row: dict[str, Any], spec: JobSpec) -> None:
        """The spec's ``mcp_servers``: the settings of each server of its ``mcp:NAME`` toolsets."""
        known = known_to(self.ctx.config, row.get("spec"))
        picked = {name: known[name].to_wire() for name in filter(None, map(mcp_server_of, spec.toolsets))
                  if name in known and known[name].enabled}
        spec.mcp_servers = picked or None

    def any_result(self, row: dict[str, Any], result: JobResult) -> None:
        """The child's report of its servers, kept in the job's ``spec.mcp`` before the terminal
        transition (``result`` and ``ps`` show it: ``hermesd.handlers.jobs.public``)."""
        if isinstance(result.mcp, dict) and result.mcp:
            spec = (self.ctx.jobs.get(row["id"]) or row).get("spec") or {}  # as another plugin's hook left it
            self.ctx.jobs.update(row["id"], spec={**spec, "mcp": result.mcp})


def listing(known: dict[str, Server]) -> list[dict[str, Any]]:
    """The servers as ``mcp.list`` answers them: ``[{name, toolset, transport, target, enabled,
    tools, exclude, timeout_seconds, connect_timeout_seconds}]`` (``tools``: the allow-list, None: all)."""
    return [{"name": s.name, "toolset": f"mcp:{s.name}", "transport": s.transport, "target": s.target(),
             "enabled": s.enabled, "tools": s.include, "exclude": s.exclude, "timeout_seconds": s.timeout_seconds,
             "connect_timeout_seconds": s.connect_timeout_seconds} for s in known.values()]


@op("mcp.list")
async def mcp_list(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The MCP servers of ``mcp_servers:`` (the config in force): ``{servers: [...]}`` (:func:`listing`)."""
    return {"servers": listing(servers(ctx.config.mcp_servers))}


@op("mcp.tools")
async def mcp_tools(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The tools MCP server ``name`` offers, asked of the server (a probe process:
    :func:`hermesd.mcp.probe.probe`): ``{name, state, error, seconds, tools: [{name, tool, offered,
    description, input_schema}]}`` (``tool``: ``mcp__NAME__TOOL``; ``offered``: its ``tools:`` lets jobs
    have it).  ``cwd``: the directory a job's would be (its server's relative ``cwd`` and paths in its
    ``args`` are relative to it; ``hermesctl`` sends its own; default: the state directory).
    ``timeout_seconds``: how long the caller waits (``hermesctl --timeout``); the server is stopped
    past it, or past its ``connect_timeout_seconds`` and 15 s when sooner, and ``state`` is
    ``timed_out`` (``error``: within what).  ``not_found`` for a name that is no server of
    ``mcp_servers``; ``bad_request`` for a ``cwd`` that is no absolute path of a directory, a
    ``timeout_seconds`` not above 0, or a disabled server (``enabled: false``: not started, as a
    job's ``mcp:NAME`` toolset is refused)."""
    name = arg(args, "name", str)
    cwd = arg(args, "cwd", str, None)
    timeout = arg(args, "timeout_seconds", (int, float), None, lo=0.001)
    if cwd is not None and not (os.path.isabs(cwd) and os.path.isdir(cwd)):
        raise ProtocolError("bad_request", f"cwd: {cwd!r} is not the absolute path of a directory", {"field": "cwd"})
    known = servers(ctx.config.mcp_servers)
    if name not in known:
        raise ProtocolError("not_found", f"no MCP server {name!r} in mcp_servers"
                            + (f" (known: {', '.join(known)})" if known else " (it has none)"), {"server": name})
    if not known[name].enabled:
        raise ProtocolError("bad_request", f"MCP server {name!r} is disabled (mcp_servers.{name}.enabled: false): "
                            "not started", {"server": name})
    from hermesd.mcp.probe import probe  # here: an idle daemon does without (Plugin.on_demand)

    return await probe(ctx, known[name], cwd, timeout)
