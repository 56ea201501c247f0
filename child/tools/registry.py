"""Toolsets, tool lookup and the one safe way to run a tool.

* :data:`TOOLSETS` maps each toolset (``terminal``, ``file``, ``web``,
  ``delegation``, ``kanban``) to its tool names: those of
  :data:`hermesd.contract.toolsets.TOOLSETS`, the one list of them; at import the registry
  checks that the tool modules define exactly those tools
  (:func:`check_against_contract`), so a tool left out of the contract, or a
  contract name without its tool, fails at once.
* :func:`resolve_toolsets` expands ``all`` / ``*`` (every toolset but
  ``kanban``, which only its literal name enables).
* :func:`execute` validates the arguments against the tool's JSON Schema and
  runs the handler; it never raises, so a model's unknown tool, bad arguments or
  a failing command become an error result the model can read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema

from child import approval, redact
from child.tools import DEFAULT_LIMITS, Tool, ToolContext, ToolError
from child.tools import delegation, files, kanban, mcp, terminal, web
from hermesd.contract import toolsets as declared

__all__ = ["DEFAULT_LIMITS", "TOOLSETS", "Tool", "ToolContext", "ToolError", "ToolResult", "execute",
           "get_tool", "known_tool_names", "resolve_toolsets", "toolset_of", "tools_for"]

_DEFINED: list[Tool] = [t for module in (terminal, files, web, delegation, kanban) for t in module.TOOLS]


def check_against_contract(tools: list[Tool], toolsets: dict[str, tuple[str, ...]]) -> None:
    """Raise ``ImportError`` naming every disagreement between the ``tools`` defined and the
    contract's ``toolsets`` (:data:`hermesd.contract.toolsets.TOOLSETS`): a tool defined twice, a tool in
    no toolset or in another one than it says, a toolset naming a tool nobody defines."""
    problems, seen = [], set()
    member = {name: ts for ts, names in toolsets.items() for name in names}
    for tool in tools:
        if tool.name in seen:
            problems.append(f"tool {tool.name!r} is defined twice")
        seen.add(tool.name)
        if tool.name not in member:
            problems.append(f"tool {tool.name!r} (toolset {tool.toolset!r}) is in no toolset of "
                            "hermesd.contract.toolsets.TOOLSETS")
        elif member[tool.name] != tool.toolset:
            problems.append(f"tool {tool.name!r} says toolset {tool.toolset!r}; hermesd.contract.toolsets.TOOLSETS has it "
                            f"in {member[tool.name]!r}")
    problems += [f"toolset {ts!r} of hermesd.contract.toolsets.TOOLSETS names {name!r}, which no tool module defines"
                 for name, ts in member.items() if name not in seen]
    if problems:
        raise ImportError("child.tools.registry: " + "; ".join(problems))


check_against_contract(_DEFINED, declared.TOOLSETS)
_TOOLS: dict[str, Tool] = {t.name: t for t in _DEFINED}

TOOLSETS: dict[str, list[str]] = {ts: list(names) for ts, names in declared.TOOLSETS.items()}
"""Toolset name → its tool names (:data:`hermesd.contract.toolsets.TOOLSETS`, as lists)."""

EXPLICIT_ONLY = declared.EXPLICIT_ONLY

MAX_REPORTED_ERRORS = 3
"""At most this many schema violations are listed in one error result."""

_VALIDATORS = {name: jsonschema.Draft202012Validator(t.input_schema) for name, t in _TOOLS.items()}


def resolve_toolsets(names: list[str]) -> list[str]:
    """Expand toolset names into the list of toolsets they enable, in :data:`TOOLSETS` order.

    ``all`` and ``*`` stand for every toolset except :data:`EXPLICIT_ONLY`; ``mcp:NAME`` (an MCP
    server's tools: :mod:`child.tools.mcp`) is left out.  Raises ``ValueError`` naming every unknown name.
    """
    unknown = [n for n in names if n not in TOOLSETS and n not in ("all", "*") and not n.startswith(declared.MCP_TOOLSET)]
    if unknown:
        raise ValueError(f"unknown toolset(s): {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(TOOLSETS)}, all, *")
    wanted = set(names)
    if wanted & {"all", "*"}:
        wanted |= {t for t in TOOLSETS if t not in EXPLICIT_ONLY}
    return [t for t in TOOLSETS if t in wanted]


def tools_for(toolsets: list[str], role: str | None = None, extra: tuple[Tool, ...] | list[Tool] = ()) -> list[Tool]:
    """The tools of these toolsets (names as :func:`resolve_toolsets` takes them)
    for an agent of ``role``: of ``kanban``, a Kanban worker gets the worker tools
    and any other agent the orchestrator tools (:func:`child.tools.kanban.offered`);
    then ``extra``, the job's own (its MCP servers' tools).  Raises ``ValueError`` for an unknown toolset."""
    return [_TOOLS[name] for ts in resolve_toolsets(toolsets) for name in TOOLSETS[ts]
            if ts != "kanban" or kanban.offered(name, role)] + list(extra)


def known_tool_names() -> list[str]:
    """Every tool of every toolset, sorted (the stable key set of ``tool_stats``)."""
    return list(declared.TOOL_NAMES)


def get_tool(name: str) -> Tool | None:
    """The tool called ``name``, or ``None``."""
    return _TOOLS.get(name)


def toolset_of(name: str) -> str | None:
    """The toolset tool ``name`` belongs to, or ``None`` for an unknown tool."""
    tool = _TOOLS.get(name)
    return tool.toolset if tool else None


@dataclass
class ToolResult:
    """The outcome of one tool call: ``ok``, the ``content`` shown to the model
    (the output, or the error message), and ``bytes`` (its UTF-8 length)."""

    ok: bool
    content: str
    bytes: int

    @classmethod
    def of(cls, ok: bool, content: str) -> ToolResult:
        """Build a result, counting the bytes of ``content``."""
        return cls(ok, content, len(content.encode("utf-8", "replace")))


def _validator(tool: Tool) -> Any:
    """The argument validator of ``tool``: a built-in tool's, or one made for a job's own tool from
    its schema's draft (an invalid schema validates nothing: the tool's server checks)."""
    found = _VALIDATORS.get(tool.name)
    if found is None or found.schema is not tool.input_schema:
        cls = jsonschema.validators.validator_for(tool.input_schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(tool.input_schema)
            found = cls(tool.input_schema)
        except jsonschema.SchemaError:
            found = cls({})
        _VALIDATORS[tool.name] = found
    return found


def _field(err: jsonschema.ValidationError) -> str:
    """The dotted path of the argument a validation error is about."""
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".")
    if err.validator == "required":
        missing = [p for p in err.validator_value if p not in err.instance]
        path = ".".join(filter(None, [path, missing[0] if missing else ""]))
    elif err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        path = ".".join(filter(None, [path, extra[0] if extra else ""]))
    return path or "(arguments)"


_REASONS = {
    "required": lambda v, inst: "is required",
    "additionalProperties": lambda v, inst: "is not an argument of this tool",
    "type": lambda v, inst: f"must be of type {v}, not {type(inst).__name__}",
    "enum": lambda v, inst: f"must be one of {', '.join(map(str, v))}",
    "maxItems": lambda v, inst: f"has {len(inst)} items, at most {v} allowed",
    "minItems": lambda v, inst: f"needs at least {v} item(s)",
    "minLength": lambda v, inst: "must not be empty" if v == 1 else f"must be at least {v} characters",
    "minimum": lambda v, inst: f"must be at least {v}",
    "maximum": lambda v, inst: f"must be at most {v}",
    "exclusiveMinimum": lambda v, inst: f"must be greater than {v}",
}
"""Short reasons per JSON Schema keyword (jsonschema's own text repeats the whole value)."""


def _describe(err: jsonschema.ValidationError) -> str:
    """A short reason for a validation error."""
    reason = _REASONS.get(str(err.validator))
    return reason(err.validator_value, err.instance) if reason else err.message[:200]


def execute(name: str, args: dict, ctx: ToolContext, allowed: list[str] | None = None) -> ToolResult:
    """Run tool ``name`` with ``args`` and return a :class:`ToolResult`; never raises
    (except ``KeyboardInterrupt``/``SystemExit``).

    ``ok=False`` with a message naming the tool (and the field, for bad
    arguments) when the tool is unknown or not in ``allowed`` (tool names; ``None``
    allows every tool), when ``args`` do not match its schema, when the handler
    raises :class:`ToolError`, or when it fails unexpectedly.  Every known secret
    value in the content is ``[REDACTED:NAME]`` (:mod:`child.redact`): the model,
    the trajectory and the log never see it.
    """
    result = _execute(name, args, ctx, allowed)
    return ToolResult.of(result.ok, redact.current().text(result.content))


def _execute(name: str, args: dict, ctx: ToolContext, allowed: list[str] | None) -> ToolResult:
    """:func:`execute` before redaction."""
    tool = _TOOLS.get(name) or ctx.extra_tools.get(name)
    if tool is None or (allowed is not None and name not in allowed):
        offered = sorted(allowed) if allowed is not None else known_tool_names()
        why = "unknown tool" if tool is None else "tool not available to this agent"
        return ToolResult.of(False, f"{why}: {name!r}; available tools: {', '.join(offered) or 'none'}"
                             + mcp.unknown_note(name, ctx.mcp))
    if not isinstance(args, dict):
        return ToolResult.of(False, f"tool {name!r}: arguments must be a JSON object, not {type(args).__name__}")
    errors = sorted(_validator(tool).iter_errors(args), key=jsonschema.exceptions.relevance, reverse=True)
    if errors:
        reasons = "; ".join(f"field '{_field(e)}' {_describe(e)}" for e in errors[:MAX_REPORTED_ERRORS])
        return ToolResult.of(False, f"tool {name!r}: invalid arguments: {reasons}")
    try:
        if approval.always(name, ctx.approval_tools) and \
                (denied := approval.ask(ctx, name, args, "approval: always")) is not None:
            return ToolResult.of(False, f"{name}: not run: {denied}")
        return ToolResult.of(True, tool.handler(args, ctx))
    except ToolError as exc:
        return ToolResult.of(False, f"{name}: {exc or 'failed'}")
    except Exception as exc:  # noqa: BLE001 - a tool bug must not end the run
        return ToolResult.of(False, f"tool {name!r} failed unexpectedly: {exc.__class__.__name__}: {exc}")
