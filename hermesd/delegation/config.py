"""The delegation job type's part of ``config.yaml``: ``delegation:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermesd.config import at_least, one_of, section
from hermesd.contract.providers import PROVIDERS


@dataclass(frozen=True)
class Delegation:
    """``delegation:`` — the caps and rules of delegation.

    ``child_timeout_seconds``: an opt-in wall-clock limit of every child (none by
    default); ``stale_after_seconds``: a child that shows no activity (model call,
    streamed reply, tool, tool output) this long is interrupted as stale;
    ``resume_on_restart``: a job running when hermesd stopped or died resumes from
    its journal in a new child at the next start (:mod:`hermesd.resume`), else it ends ``lost``;
    ``worktree_isolation`` (Hermes Agent's key): every delegation whose working directory is in a
    git repository runs in a git worktree of its own unless its task says ``worktree: false``
    (:mod:`hermesd.worktrees.ops`; one outside a repository runs where it is).
    """

    max_async_children: int = field(default=3, metadata=at_least(1))
    max_concurrent_children: int = field(default=3, metadata=at_least(1))
    max_spawn_depth: int = field(default=1, metadata=at_least(0))
    max_tasks_per_call: int = field(default=8, metadata=at_least(1))
    child_timeout_seconds: float | None = field(default=None, metadata=at_least(0.1))
    stale_after_seconds: float = field(default=600.0, metadata=at_least(0.1))
    subagent_auto_approve: bool = False
    resume_on_restart: bool = True
    worktree_isolation: bool = False
    max_turns: int = field(default=10, metadata=at_least(1))
    model: str | None = None
    provider: str | None = field(default=None, metadata=one_of(*PROVIDERS))


@dataclass(frozen=True)
class Sections:
    """The delegation plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    delegation: Delegation = section(Delegation)


def child_defaults(section: Delegation) -> dict[str, Any]:
    """What a child of a job type that takes its defaults from ``delegation:`` gets unless its job
    says otherwise: :class:`hermesd.contract.wire.JobSpec` field → value (``provider``, ``model``: None
    falls back to the config's top-level ones).  A plugin's :meth:`hermesd.plugin.Plugin.spec_defaults`."""
    return {"provider": section.provider, "model": section.model, "max_turns": section.max_turns,
            "timeout_seconds": section.child_timeout_seconds,
            "activity_interval_seconds": min(2.0, section.stale_after_seconds / 4),
            "journal_wait_seconds": section.stale_after_seconds,
            "max_spawn_depth": section.max_spawn_depth, "auto_approve": section.subagent_auto_approve}
