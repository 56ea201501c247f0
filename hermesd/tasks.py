"""Validating task arguments (``delegate``, ``spawn_parallel``, ``child.delegate``) into job fields."""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING, Any

from hermesd import config as config_mod
from hermesd import limits
from hermesd.contract import PROVIDERS, ROLES
from hermesd.protocol import ProtocolError, arg, expand_toolsets, in_range

if TYPE_CHECKING:
    from hermesd.context import Context

MAX_GOAL_BYTES = 256 * 1024
MAX_CONTEXT_BYTES = 256 * 1024
MAX_TURNS = 100_000
MAX_TIMEOUT_SECONDS = 366 * 86400.0
SPEC_ARGS = {"max_turns": int, "timeout_seconds": (int, float), "script": list, "reasoning_effort": str,
             "system_prompt": str}


def task_fields(ctx: Context, args: dict[str, Any], *, default_toolsets: list[str] | None = None) -> dict[str, Any]:
    """Validate one task's arguments into ``jobs`` columns.

    ``goal`` (required, non-empty), ``context``, ``toolsets`` (list), ``role``
    (``leaf``/``orchestrator``), ``model``, ``provider``, ``cwd`` (absolute),
    and the spec extras ``max_turns``, ``timeout_seconds``, ``script``,
    ``reasoning_effort``, ``system_prompt``, and the resource limits
    ``memory_limit_mb``, ``cpu_limit_seconds``, ``max_processes``,
    ``max_open_files`` (see :mod:`hermesd.limits`; at most the config's).  Raises ``ProtocolError``
    (``bad_request``/``too_large``) naming the field.
    """
    goal = arg(args, "goal", str)
    if not goal.strip():
        raise ProtocolError("bad_request", "argument 'goal' must not be empty", {"field": "goal"})
    if len(goal.encode()) > MAX_GOAL_BYTES:
        raise ProtocolError("too_large", f"goal exceeds {MAX_GOAL_BYTES} bytes", {"field": "goal"})
    toolsets = arg(args, "toolsets", list, None)
    if toolsets is None:
        toolsets = default_toolsets if default_toolsets is not None else list(ctx.config.toolsets)
    if not all(isinstance(t, str) for t in toolsets):
        raise ProtocolError("bad_request", "argument 'toolsets' must be a list of strings", {"field": "toolsets"})
    context = arg(args, "context", str, None)
    if context is not None and len(context.encode()) > MAX_CONTEXT_BYTES:
        raise ProtocolError("too_large", f"context exceeds {MAX_CONTEXT_BYTES} bytes", {"field": "context"})
    cwd = arg(args, "cwd", str, None)
    if cwd is not None and "\x00" in cwd:
        raise ProtocolError("bad_request", "argument 'cwd' must not contain a NUL byte", {"field": "cwd"})
    if cwd is not None and not os.path.isabs(cwd):
        raise ProtocolError("bad_request", f"argument 'cwd' must be an absolute path, not {cwd!r}", {"field": "cwd"})
    spec = {}
    for name, types in SPEC_ARGS.items():
        value = arg(args, name, types, None)
        if value is not None:
            spec[name] = value
    if spec.get("reasoning_effort") not in (None, *config_mod.REASONING_EFFORTS):
        raise ProtocolError("bad_request", f"reasoning_effort must be one of {', '.join(config_mod.REASONING_EFFORTS)}",
                            {"field": "reasoning_effort"})
    resources = limits.requested(args, limits.ceiling(ctx.config.child_limits))
    if resources:
        spec["resources"] = resources
    in_range(spec.get("max_turns"), "max_turns", 1, MAX_TURNS)
    in_range(spec.get("timeout_seconds"), "timeout_seconds", 0.1, MAX_TIMEOUT_SECONDS)
    return {
        "goal": goal, "context": context, "toolsets": expand_toolsets(toolsets),
        "role": arg(args, "role", str, "leaf", choices=ROLES),
        "model": arg(args, "model", str, None),
        "provider": arg(args, "provider", str, None, choices=PROVIDERS),
        "cwd": cwd, "spec": spec,
    }


def new_group() -> str:
    """A fresh foreground-group pool name: ``group:<hex>`` (limit ``max_concurrent_children``)."""
    return f"group:{secrets.token_hex(6)}"
