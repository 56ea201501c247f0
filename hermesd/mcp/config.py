"""``mcp_servers:`` — the MCP servers jobs may use (a leaf: dataclasses and the parser only).

The shape is Hermes Agent's (``~/.hermes/config.yaml``, its MCP config reference), so a
Hermes user's section works as it is::

    mcp_servers:
      time:                      # a stdio server: hermesd's child starts it
        command: mcp-server-time
        args: [--local-timezone, UTC]
        env: {}                  # its whole environment besides HOME, PATH…: nothing else reaches it
      github:                    # a streamable HTTP server
        url: https://api.githubcopilot.com/mcp/
        headers: {Authorization: "Bearer ${GITHUB_TOKEN}"}
        tools: [get_issue, list_issues]   # allow-list (or {include: […], exclude: […]})
        timeout_seconds: 60      # one tool call (Hermes: timeout); default 120
        connect_timeout_seconds: 30  # start and handshake (Hermes: connect_timeout); default 60
        enabled: true

A server is ``command`` (with ``args``, ``env``, ``cwd``: stdio) or ``url`` (with ``headers``:
streamable HTTP), never both.  ``${NAME}`` in an ``env`` or ``headers`` value is the child's
variable ``NAME`` (passing a variable by name: nothing else of hermesd's environment reaches a
server).  A job uses a server by its toolset ``mcp:NAME``; its tools reach the model as
``mcp__NAME__TOOL`` (:func:`hermesd.contract.toolsets.mcp_tool_name`).  Every problem is named
``file:line: mcp_servers.NAME.key: reason`` by ``hermesd check-config``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from hermesd.contract.toolsets import MCP_TOOLSET, mcp_server_of

NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*\Z")
"""A server's name: letters, digits, ``-`` and single ``_`` (``__`` separates the parts of a tool's
name, ``mcp__NAME__TOOL``)."""

DEFAULT_TIMEOUT = 120.0
"""Seconds one tool call may take (Hermes Agent's default ``timeout``)."""
DEFAULT_CONNECT_TIMEOUT = 60.0
"""Seconds starting a server and its handshake may take (Hermes Agent's default ``connect_timeout``)."""

KEYS = ("command", "args", "env", "cwd", "url", "headers", "timeout_seconds", "connect_timeout_seconds",
        "tools", "enabled")
ALIASES = {"timeout": "timeout_seconds", "connect_timeout": "connect_timeout_seconds"}
"""Hermes Agent's names of hermesd's keys."""


@dataclass(frozen=True)
class Server:
    """One MCP server as a job's spec carries it (``JobSpec.mcp_servers[name]``: :meth:`to_wire`).

    ``transport``: ``stdio`` (``command``, ``args``, ``env``, ``cwd``) or ``http`` (``url``,
    ``headers``: streamable HTTP); ``timeout_seconds``: one tool call; ``connect_timeout_seconds``:
    the start and the handshake; ``include``: the tools offered (None: all), ``exclude``: tools
    never offered (``include`` wins); ``enabled``: false leaves it out (a job naming it is refused)."""

    name: str
    transport: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout_seconds: float = DEFAULT_TIMEOUT
    connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT
    include: list[str] | None = None
    exclude: list[str] = field(default_factory=list)
    enabled: bool = True

    def to_wire(self) -> dict[str, Any]:
        """Plain data (the spec's entry; :meth:`from_wire` reads it back)."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Server:
        """A server from :meth:`to_wire`'s map (unknown keys ignored)."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})

    def offers(self, tool: str) -> bool:
        """Whether the server's tool ``tool`` (its own name) is offered to the model."""
        return (tool in self.include) if self.include is not None else tool not in self.exclude

    def target(self) -> str:
        """What it runs or reaches, for people: the command line or the URL."""
        return " ".join([self.command or "", *self.args]).strip() if self.transport == "stdio" else str(self.url)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _mapping(value: Any, what: str, key: str, problems: list[tuple[str, str]]) -> dict[str, str]:
    """``value`` as ``{str: str}`` (numbers and booleans written as text); problems named under ``key``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append((key, f"must be a mapping of {what} to values"))
        return {}
    out = {}
    for name, item in value.items():
        if not isinstance(item, (str, int, float)) or item is None:
            problems.append((f"{key}.{name}", f"must be a string, not {item!r}"))
            continue
        out[str(name)] = str(item).lower() if isinstance(item, bool) else str(item)
    return out


def _seconds(value: Any, key: str, problems: list[tuple[str, str]], default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
        problems.append((key, f"must be a number of seconds > 0 and at most 86400, not {value!r}"))
        return default
    return float(value)


def _tools(value: Any, key: str, problems: list[tuple[str, str]]) -> tuple[list[str] | None, list[str]]:
    """``tools:`` as ``(include, exclude)``: a list is the allow-list; Hermes Agent's mapping
    ``{include, exclude}`` (each a name or a list) too."""
    if value is None:
        return None, []
    if _strings(value):
        return list(value), []
    if isinstance(value, dict):
        unknown = sorted(set(map(str, value)) - {"include", "exclude"})
        for name in unknown:
            problems.append((f"{key}.{name}", "unknown key (known keys: exclude, include)"))
        parts = []
        for part in ("include", "exclude"):
            item = value.get(part)
            item = [item] if isinstance(item, str) else item
            if item is not None and not _strings(item):
                problems.append((f"{key}.{part}", "must be a tool name or a list of tool names"))
                item = None
            parts.append(item)
        return (parts[0] if parts[0] else None), list(parts[1] or [])
    problems.append((key, "must be a list of tool names (the allow-list) or a mapping {include: […], exclude: […]}"))
    return None, []


def parse_server(name: Any, entry: Any, problems: list[tuple[str, str]]) -> Server | None:
    """One server's entry; each problem appended as ``(key under mcp_servers, reason)``; None when unusable."""
    if not isinstance(name, str) or not NAME.match(name):
        problems.append((str(name), "a server's name is letters, digits, '-' and single '_' (it is part of its "
                                    "tools' names, mcp__NAME__TOOL)"))
        return None
    if not isinstance(entry, dict):
        problems.append((name, "must be a mapping: command (a stdio server) or url (a streamable HTTP one)"))
        return None
    before = len(problems)
    given, written = {}, {}
    for key, value in entry.items():
        real = ALIASES.get(str(key), str(key))
        if real not in KEYS:
            problems.append((f"{name}.{key}", f"unknown key (known keys: {', '.join(KEYS)}; "
                                              f"{', '.join(f'{a} for {k}' for a, k in ALIASES.items())})"))
        elif real in given:
            problems.append((f"{name}.{key}", f"{real} is given twice (once as {key}); remove one"))
        else:
            given[real], written[real] = value, str(key)
    command, url = given.get("command"), given.get("url")
    if command is None and url is None:
        problems.append((name, "needs command (a stdio server) or url (a streamable HTTP server)"))
    elif command is not None and url is not None:
        problems.append((name, "has both command and url; a server is one or the other"))
    if command is not None and (not isinstance(command, str) or not command.strip()):
        problems.append((f"{name}.command", f"must be a command (a string), not {command!r}"))
    if url is not None and (not isinstance(url, str) or not re.match(r"https?://[^/\s]+\S*\Z", url)):
        problems.append((f"{name}.url", f"must be an http:// or https:// URL such as http://127.0.0.1:8000/mcp, "
                                        f"not {url!r}"))
    stdio_only = [k for k in ("args", "env", "cwd") if k in given] if url is not None else []
    http_only = ["headers"] if command is not None and "headers" in given else []
    for key in stdio_only + http_only:
        problems.append((f"{name}.{key}", f"is for a {'stdio' if key in stdio_only else 'streamable HTTP'} server; "
                                          f"this one has {'url' if key in stdio_only else 'command'}"))
    args = given.get("args") or []
    if not _strings(args):
        problems.append((f"{name}.args", "must be a list of strings"))
    cwd = given.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        problems.append((f"{name}.cwd", f"must be a directory (a string), not {cwd!r}"))
    enabled = given.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append((f"{name}.enabled", f"must be true or false, not {enabled!r}"))
    env = _mapping(given.get("env"), "variable names", f"{name}.env", problems)
    headers = _mapping(given.get("headers"), "header names", f"{name}.headers", problems)
    include, exclude = _tools(given.get("tools"), f"{name}.tools", problems)
    timeout = _seconds(given.get("timeout_seconds"), f"{name}.{written.get('timeout_seconds')}", problems,
                       DEFAULT_TIMEOUT)
    connect = _seconds(given.get("connect_timeout_seconds"), f"{name}.{written.get('connect_timeout_seconds')}",
                       problems, DEFAULT_CONNECT_TIMEOUT)
    if len(problems) > before:
        return None
    return Server(name=name, transport="stdio" if command is not None else "http", command=command,
                  args=list(args), env=env, cwd=cwd, url=url, headers=headers, timeout_seconds=timeout,
                  connect_timeout_seconds=connect, include=include, exclude=exclude, enabled=enabled)


def parse_servers(data: Any) -> tuple[dict[str, Server], list[tuple[str, str]]]:
    """``mcp_servers:`` (a mapping of names to servers) as ``({name: Server}, problems)``; each
    problem is ``(key under mcp_servers, reason)``."""
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [("", "must be a mapping of server names to servers, e.g. {time: {command: mcp-server-time}}")]
    problems: list[tuple[str, str]] = []
    servers = {}
    for name, entry in data.items():
        server = parse_server(name, entry, problems)
        if server is not None:
            servers[server.name] = server
    return servers, problems


def servers(raw: Any) -> dict[str, Server]:
    """The servers of a checked ``mcp_servers`` value (the config's, a profile's), by name."""
    return parse_servers(raw)[0]


def unknown_toolsets(toolsets: list[str], known: dict[str, Server]) -> list[str]:
    """The ``mcp:NAME`` toolsets of ``toolsets`` that name no enabled server of ``known``, each with why."""
    bad = []
    for toolset in toolsets:
        name = mcp_server_of(toolset)
        if name is None:
            continue
        if name not in known:
            bad.append(f"{toolset!r} names no server of mcp_servers"
                       + (f" (known: {', '.join(MCP_TOOLSET + n for n in known)})" if known else " (it has none)"))
        elif not known[name].enabled:
            bad.append(f"{toolset!r}: server {name!r} is disabled (mcp_servers.{name}.enabled)")
    return bad


@dataclass(frozen=True)
class Sections:
    """The MCP plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    mcp_servers: dict[str, Any] = field(default_factory=dict, metadata={"check": parse_servers})

    def check(self: Any) -> list[tuple[str, str]]:
        """Every ``mcp:NAME`` of ``toolsets:`` names an enabled server."""
        return [("toolsets", why) for why in unknown_toolsets(list(self.toolsets), servers(self.mcp_servers))]

    def mcp(self: Any) -> dict[str, Server]:
        """The configured servers, by name (:func:`servers`)."""
        return servers(self.mcp_servers)
