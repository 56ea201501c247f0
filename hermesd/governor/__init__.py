"""The governor: one limiter per provider endpoint and key for every model call of the fleet.

A child asks before each model call (``child.grant``: one short request) and is told "go"
(a grant id) or "wait N seconds, because R"; the waiting happens in the child, never on the
daemon's loop.  After the call it reports the outcome (``child.grant_done``), and what a
429/529 or the rate-limit headers said is learned for every child of that endpoint.

* :mod:`hermesd.governor.headers` — reading ``retry-after``, ``anthropic-ratelimit-*`` and
  ``x-ratelimit-*``;
* :mod:`hermesd.governor.limiter` — the configured token buckets and the adaptive concurrency
  of one endpoint and key, and what decides a grant;
* :mod:`hermesd.governor.learned` — one limit as the headers tell it, kept as the provider's token bucket;
* :mod:`hermesd.governor.backoff` — the pause after a refusal: one per burst, a probe, then the rest;
* :mod:`hermesd.governor.service` — the limiters of the daemon, grants in flight, who waits;
* :mod:`hermesd.governor.ops` — the child ops and the plugin that releases a dead job's grants.

This module imports nothing (children import :mod:`hermesd.contract` only).
"""

OUTCOMES = ("ok", "rate_limited", "overloaded", "quota", "error")
"""What a child reports of a call: it went well; refused by the rate limit (429); the provider
was overloaded (529, 503, an ``overloaded_error`` mid-stream); the money ran out (not retried);
any other failure."""
