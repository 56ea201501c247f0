"""A job's rlimits as one environment variable, and setting them: a leaf that children
import (the warm spare sets them once it has its job), as the daemon does (``preexec_fn``
of a cold start).  It imports nothing from hermesd; :mod:`hermesd.system.limits` says where the
limits come from and what they mean.

:data:`ENV` holds ``NAME=SOFT[:HARD]`` items joined by commas, ``NAME`` one of
``as`` (bytes of address space), ``cpu`` (seconds), ``nproc`` and ``nofile``
(counts): for example ``as=268435456,cpu=10:15``.

It also names what a child's tool commands carry for the limits (the terminal tool,
:mod:`child.tools.terminal`, sets both): :data:`TOOL_RUN_ENV`, by which the daemon's memory
watch (:class:`hermesd.system.limits.MemoryWatch`) tells one command's processes from the
agent's, and :data:`TOOL_OOM_SCORE_ADJ` (:func:`raise_oom_score`), by which the kernel's OOM
killer in a job's cgroup makes the same choice.
"""

from __future__ import annotations

import os
import resource
from typing import Callable

ENV = "HERMES_RLIMITS"
NAMES = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC,
         "nofile": resource.RLIMIT_NOFILE}


TOOL_RUN_ENV = "HERMES_TOOL_RUN"
"""Variable set to a fresh id in the environment of every command a tool runs (inherited by
all it starts): over a job's memory limit the daemon kills the processes that share the id
of its largest process, never the agent's own."""

TOOL_OOM_SCORE_ADJ = 1000
"""``/proc/PID/oom_score_adj`` of a tool's command (proc(5)): the most a process may ask
for, so that the kernel's OOM killer (in a job's cgroup, at its ``memory.max``) takes a
tool's process before the agent's (0, as it started) whatever their sizes, the largest
first.  Children of the command inherit it."""


def raise_oom_score() -> None:
    """Set this process's ``oom_score_adj`` to :data:`TOOL_OOM_SCORE_ADJ` (a ``preexec_fn``
    of a tool's command: one ``open`` and ``write``; raising it needs no privilege).  A
    kernel without the file (or a sandbox refusing it) is left as it is."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, b"%d" % TOOL_OOM_SCORE_ADJ)
    except OSError:
        pass
    finally:
        os.close(fd)


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
