"""Upkeep's part of ``config.yaml``: ``retention:`` and ``logs:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermesd.config import at_least, section


@dataclass(frozen=True)
class Retention:
    """``retention:`` — which finished jobs go, with their folders and events (see
    :mod:`hermesd.upkeep.retention`); both rules off by default (nothing is removed)."""

    max_age_days: float | None = field(default=None, metadata=at_least(0))
    max_jobs: int | None = field(default=None, metadata=at_least(1))
    interval_seconds: float = field(default=300.0, metadata=at_least(1))
    batch_size: int = field(default=200, metadata=at_least(1, 100_000))


@dataclass(frozen=True)
class Logs:
    """``logs:`` — the cap of each job's log (see :mod:`hermesd.upkeep.logcap`)."""

    max_bytes: int = field(default=10 * 1024 * 1024, metadata=at_least(4096))
    keep: int = field(default=2, metadata=at_least(0, 100))
    check_interval_seconds: float = field(default=1.0, metadata=at_least(0.05))


@dataclass(frozen=True)
class Sections:
    """The upkeep plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    retention: Retention = section(Retention)
    logs: Logs = section(Logs)
