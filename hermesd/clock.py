"""Time in one place: monotonic seconds for durations, ISO 8601 UTC for display."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def monotonic() -> float:
    """Seconds on the monotonic clock (durations and timeouts only)."""
    return time.monotonic()


def now_iso() -> str:
    """Wall-clock time as ISO 8601 UTC with milliseconds: ``2026-11-29T11:25:08.123Z``."""
    return iso(None)


def iso(epoch_seconds: float | None) -> str:
    """``epoch_seconds`` (None: now) as ISO 8601 UTC with milliseconds, as :func:`now_iso`."""
    moment = datetime.now(timezone.utc) if epoch_seconds is None else datetime.fromtimestamp(epoch_seconds, timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """Parse a timestamp written by :func:`now_iso` (or any ISO 8601 with offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def age_seconds(text: str) -> float:
    """Seconds elapsed since the ISO 8601 timestamp ``text`` (wall clock, for display)."""
    return (datetime.now(timezone.utc) - parse_iso(text)).total_seconds()
