"""The sessions job type's part of ``config.yaml``: ``sessions:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermesd.config import at_least, section


@dataclass(frozen=True)
class Sessions:
    """``sessions:``: what a session's turn is sent (:mod:`hermesd.sessions.compaction`).  Past
    ``compact_at_tokens`` (default: ``compact_share`` of the model's context window — the known
    window of ``model``, or ``context_window_tokens``) the older turns are summarised; the most
    recent ``keep_recent_tokens`` (default: a quarter of the limit) stay verbatim."""

    compact_at_tokens: int | None = field(default=None, metadata=at_least(256))
    compact_share: float = field(default=0.6, metadata=at_least(0.05, 0.95))
    keep_recent_tokens: int | None = field(default=None, metadata=at_least(1))
    context_window_tokens: int | None = field(default=None, metadata=at_least(1024))


@dataclass(frozen=True)
class Sections:
    """The sessions plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    sessions: Sessions = section(Sessions)
