"""A job's rlimits as one environment variable, and setting them: a leaf that children
import (the warm spare sets them once it has its job), as the daemon does (``preexec_fn``
of a cold start).  It imports nothing from hermesd; :mod:`hermesd.system.limits` says where the
limits come from and what they mean.

:data:`ENV` holds ``NAME=SOFT[:HARD]`` items joined by commas, ``NAME`` one of
``as`` (bytes of address space), ``cpu`` (seconds), ``nproc`` and ``nofile``
(counts): for example ``as=268435456,cpu=10:15``.
"""

from __future__ import annotations

import resource
from typing import Callable

ENV = "HERMES_RLIMITS"
NAMES = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC,
         "nofile": resource.RLIMIT_NOFILE}


def encode(items: dict[str, tuple[int, int]]) -> dict[str, str]:
    """``{ENV: "as=…,cpu=SOFT:HARD"}`` from ``{name: (soft, hard)}`` (empty without any)."""
    text = ",".join(f"{name}={soft}" + (f":{hard}" if hard != soft else "") for name, (soft, hard) in items.items())
    return {ENV: text} if text else {}


def parse(env: dict[str, str]) -> list[tuple[int, int, int]]:
    """``[(resource, soft, hard)]`` from :data:`ENV` in ``env`` (``[]`` without it).
    Raises ``ValueError`` (``KeyError`` for an unknown name) for a malformed value."""
    out = []
    for part in filter(None, (env.get(ENV) or "").split(",")):
        name, _, value = part.partition("=")
        soft, _, hard = value.partition(":")
        out.append((NAMES[name], int(soft), int(hard or soft)))
    return out


def apply(pairs: list[tuple[int, int, int]]) -> None:
    """``setrlimit`` each ``(resource, soft, hard)``, never above the current hard limit
    (an unprivileged process cannot raise it).  Raises ``OSError``/``ValueError``."""
    for res, soft, hard in pairs:
        _, current_hard = resource.getrlimit(res)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        resource.setrlimit(res, (min(soft, hard), hard))


def apply_env(env: dict[str, str]) -> None:
    """Set the rlimits :data:`ENV` in ``env`` names on this process (a warm spare, given its job)."""
    apply(parse(env))


def preexec(env: dict[str, str]) -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets the rlimits in ``env`` (None without any, so that
    subprocess keeps its fast path).  Parsed here, in the parent: what runs between
    fork and exec only calls ``setrlimit``."""
    pairs = parse(env)
    return (lambda: apply(pairs)) if pairs else None
