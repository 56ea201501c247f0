"""The governor's part of ``config.yaml``: ``rate_limits:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermesd.config import at_least

RATE_LIMIT_KEYS = {"rate_limit_key": True}
"""``rate_limits:`` is keyed by a provider name (all its endpoints) or an endpoint's ``http(s)://`` URL."""


@dataclass(frozen=True)
class RateLimit:
    """One entry of ``rate_limits:`` — what the governor (:mod:`hermesd.governor`) lets every
    child together send to one provider endpoint with one key: requests, input tokens and
    output tokens per minute, and calls in flight (unset: not limited by the config; what the
    provider's 429s and headers say still holds)."""

    requests_per_minute: float | None = field(default=None, metadata=at_least(0.001))
    input_tokens_per_minute: float | None = field(default=None, metadata=at_least(1))
    output_tokens_per_minute: float | None = field(default=None, metadata=at_least(1))
    max_concurrent: int | None = field(default=None, metadata=at_least(1, 100_000))


@dataclass(frozen=True)
class Sections:
    """The governor's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    rate_limits: dict[str, RateLimit] = field(default_factory=dict, metadata=RATE_LIMIT_KEYS)
