"""Validating task arguments (``delegate``, ``spawn_parallel``, ``child.delegate``) into job fields."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from hermesd import config as config_mod
from hermesd.system import limits
from hermesd.billing.budget import budget_of
from hermesd.contract.providers import PROVIDER_KEYS, PROVIDERS
from hermesd.contract.toolsets import ROLES
from hermesd.protocol import ProtocolError, arg, expand_toolsets, in_range
from hermesd.redaction import Secrets
from hermesd.worktrees import ops as worktrees

if TYPE_CHECKING:
    from hermesd.context import Context

MAX_GOAL_BYTES = 256 * 1024
MAX_CONTEXT_BYTES = 256 * 1024
MAX_TURNS = 100_000
MAX_TIMEOUT_SECONDS = 366 * 86400.0
SPEC_ARGS = {"max_turns": int, "timeout_seconds": (int, float), "script": list, "reasoning_effort": str,
             "system_prompt": str, "output_schema": dict, "env": dict, "secrets": dict, "after": list,
             "image": str, "resume": bool, "worktree": bool}
MAX_ENV_BYTES = 64 * 1024


def task_fields(ctx: Context, args: dict[str, Any], *, default_toolsets: list[str] | None = None) -> dict[str, Any]:
    """Validate one task's arguments into ``jobs`` columns.

    ``goal`` (required, non-empty), ``context``, ``toolsets`` (list), ``role``
    (``leaf``/``orchestrator``), ``model``, ``provider``, ``cwd`` (absolute),
    and the spec extras ``max_turns``, ``timeout_seconds`` (an opt-in wall-clock
    limit: a finite number > 0), ``script``, ``reasoning_effort``,
    ``system_prompt``, ``output_schema`` (a JSON Schema the final answer must
    validate against), ``env`` (``{NAME: value}`` added to the environment of the child and its
    tools; a value ``null``: the daemon's variable of that name, passed to the tools even when
    secret; ``HERMES_*`` names are the daemon's), ``secrets`` (the same, and secret whatever
    their names: redacted wherever stored or shown, see :func:`split_env`) and ``after`` (job ids,
    checked by :mod:`hermesd.control.dependencies`), ``image`` (run the terminal in a
    container of that image: :class:`hermesd.containers.ops.ContainersPlugin`), ``resume`` (false: a restart
    ends the job ``lost`` instead of resuming it: :mod:`hermesd.resume`), ``worktree`` (run in a git
    worktree of its own on branch ``hermes/JOB_ID``; default ``delegation.worktree_isolation``:
    :mod:`hermesd.worktrees.ops`; outside a repository ``not_a_repository``), and the resource limits
    ``memory_limit_mb``, ``cpu_limit_seconds``, ``max_processes``,
    ``max_open_files`` (see :mod:`hermesd.system.limits`; at most the config's), and the budget of the
    job's whole subtree ``max_cost_usd``, ``max_tokens`` (:mod:`hermesd.billing.budget`).  Raises ``ProtocolError``
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
    budget = budget_of(args)
    if budget:
        spec["budget"] = budget
    in_range(spec.get("max_turns"), "max_turns", 1, MAX_TURNS)
    in_range(spec.get("timeout_seconds"), "timeout_seconds", 0.1, MAX_TIMEOUT_SECONDS)
    check_limit(spec.get("timeout_seconds"), "timeout_seconds")
    if "output_schema" in spec:
        check_schema(spec["output_schema"])
    values = split_env(ctx, spec)
    if spec.get("worktree") is None and ctx.config.delegation.worktree_isolation:
        spec["worktree"] = worktrees.AUTO
    worktrees.check(cwd, spec)
    fields = {
        "goal": goal, "context": context, "toolsets": expand_toolsets(toolsets),
        "role": arg(args, "role", str, "leaf", choices=ROLES),
        "model": arg(args, "model", str, None),
        "provider": arg(args, "provider", str, None, choices=PROVIDERS),
        "cwd": cwd, "spec": spec,
    }
    if values:
        fields["secret_values"] = values
    return fields


def split_env(ctx: Context, spec: dict[str, Any]) -> dict[str, str]:
    """Check the task's ``env`` and ``secrets`` (:func:`check_env`) and keep their secret values
    out of ``spec`` (so out of ``state.db``): returns them (``{NAME: value}``, for
    :mod:`hermesd.secret_values`).  ``spec`` is left with ``env`` — every variable given, the
    value of each plain one, ``null`` for the rest —, ``secrets`` (the names given as secrets,
    secret by the job's word: :data:`hermesd.redaction.SECRETS_ENV`) and ``secret_values`` (the
    names whose values were returned).  A variable is secret as :class:`hermesd.redaction.Secrets`
    says (a provider key, ``secrets:``, the patterns) or when given in ``secrets``."""
    env, given = spec.pop("env", None) or {}, spec.pop("secrets", None) or {}
    check_env(env, "env")
    check_env(given, "secrets")
    check_size({**env, **given})
    if set(env) & set(given):
        name = sorted(set(env) & set(given))[0]
        raise ProtocolError("bad_request", f"{name} is given both in env and in secrets", {"field": "secrets", "name": name})
    rule = Secrets((*PROVIDER_KEYS, *ctx.config.secrets, *given))
    values = {k: v for k, v in {**env, **given}.items() if v is not None and rule.secret(k)}
    merged = {k: None if k in values else v for k, v in {**env, **given}.items()}
    if merged:
        spec["env"] = merged
    if given:
        spec["secrets"] = sorted(given)
    if values:
        spec["secret_values"] = sorted(values)
    return values


def new_group() -> str:
    """A fresh foreground-group pool name: ``group:<hex>`` (limit ``max_concurrent_children``)."""
    return f"group:{os.urandom(6).hex()}"  # secrets.token_hex(6), without importing secrets (see jobs)



def check_limit(value: Any, name: str) -> None:
    """A time limit in seconds must be a finite number > 0 (None: no limit); raises ``bad_request``."""
    if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value <= 0):
        raise ProtocolError("bad_request", f"{name} must be a number of seconds > 0, not {value!r}", {"field": name})


def check_schema(schema: Any) -> None:
    """``output_schema`` must be a valid JSON Schema (checked against its dialect's metaschema with
    ``jsonschema``; Draft 2020-12 unless ``$schema`` names another).  Raises ``bad_request`` naming the
    path inside the schema where it is wrong (e.g. ``$.properties.age.type``)."""
    import jsonschema

    if not isinstance(schema, dict):
        raise ProtocolError("bad_request", "output_schema must be a JSON Schema object", {"field": "output_schema"})
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise ProtocolError("bad_request", f"output_schema is not a valid JSON Schema: at {path}: {exc.message}",
                            {"field": "output_schema", "path": path}) from None


def check_env(env: dict[str, Any], field: str) -> None:
    """``env`` (argument ``field``): ``{NAME: value}``, names ``[A-Za-z_][A-Za-z0-9_]*`` and not ``HERMES_*``,
    values strings without NUL or ``null`` (the daemon's: one it does not have is refused, as a job
    would silently go without it); raises ``bad_request`` naming the variable."""
    for name, value in env.items():
        where = {"field": field, "name": str(name)}
        if not isinstance(name, str) or not config_mod.ENV_NAME.match(name):
            raise ProtocolError("bad_request", f"{field}: {name!r} is not a variable name", where)
        if name.startswith("HERMES_"):
            raise ProtocolError("bad_request", f"{field}: {name} is set by hermesd itself", where)
        if value is not None and (not isinstance(value, str) or "\x00" in value):
            raise ProtocolError("bad_request", f"{field}: the value of {name} must be a string without NUL, "
                                "or null (the daemon's)", where)
        if value is None and name not in os.environ:
            raise ProtocolError("bad_request", f"{field}: {name} is not set in hermesd's environment (give "
                                f"{name}=VALUE)", where)


def check_size(env: dict[str, str | None]) -> None:
    """The variables a job is given hold at most :data:`MAX_ENV_BYTES`; raises ``too_large``."""
    if sum(len(name) + len((value or "").encode()) for name, value in env.items()) > MAX_ENV_BYTES:
        raise ProtocolError("too_large", f"env and secrets exceed {MAX_ENV_BYTES} bytes", {"field": "env"})
