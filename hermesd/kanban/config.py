"""The Kanban job type's part of ``config.yaml``: ``kanban:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermesd.config import at_least, section


@dataclass(frozen=True)
class Kanban:
    """``kanban:`` — the dispatcher's timing and retry rules."""

    heartbeat_ttl_seconds: float = field(default=300.0, metadata=at_least(1))
    max_spawn_failures: int = field(default=3, metadata=at_least(1))
    dispatch_interval_seconds: float = field(default=1.0, metadata=at_least(0.05))


@dataclass(frozen=True)
class Sections:
    """The Kanban plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    kanban: Kanban = section(Kanban)
