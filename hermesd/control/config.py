"""The operator controls' part of ``config.yaml``: ``hooks:`` and ``approvals:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermesd.config import at_least, section
from hermesd.contract.toolsets import MCP_TOOL, TOOL_NAMES


@dataclass(frozen=True)
class Hooks:
    """``hooks:`` — operator callbacks (:mod:`hermesd.control.hooks`)."""

    on_job_end: str | None = None
    on_approval_request: str | None = None
    timeout_seconds: float = field(default=30.0, metadata=at_least(0.1))


@dataclass(frozen=True)
class Approvals:
    """``approvals:`` — tool calls that wait for a person (:mod:`hermesd.control.approvals`).

    ``timeout_seconds``: a request nobody answers this long is denied (the model is told so);
    ``always``: tools that always wait for a person (``approval: always``), besides the
    commands the tripwire holds; an MCP server's tools by name or pattern (``mcp__github__*``).
    """

    timeout_seconds: float = field(default=600.0, metadata=at_least(1))
    always: list[str] = field(default_factory=list, metadata={"names": TOOL_NAMES, "prefix": MCP_TOOL})


@dataclass(frozen=True)
class Sections:
    """The operator controls' part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    hooks: Hooks = section(Hooks)
    approvals: Approvals = section(Approvals)
