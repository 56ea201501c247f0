"""A fake model server that says no: rate limits, overload, quota and a context window.

:class:`Limits` is a gate in front of a :class:`tests.fakes.FakeServer` (``server.limits = Limits(...)``,
or the ``limits=`` argument of the two fakes).  Each dimension (requests, input tokens, output
tokens) is a token bucket of ``limit`` per ``window`` seconds, continuously refilled — the
algorithm Anthropic documents for its own limits ("your capacity is continuously replenished up
to your maximum limit", https://docs.anthropic.com/en/api/rate-limits).  A request the buckets
cannot take is refused with HTTP 429 and ``retry-after`` (whole seconds, rounded up) and, with
``retry_after_ms``, ``retry-after-ms``; every response carries the limits' headers in the API's
own form:

* Anthropic (https://docs.anthropic.com/en/api/rate-limits#response-headers):
  ``anthropic-ratelimit-requests-limit|remaining|reset``, ``anthropic-ratelimit-input-tokens-*``,
  ``anthropic-ratelimit-output-tokens-*``; ``…-reset`` is the RFC 3339 time (whole seconds,
  rounded up) at which the bucket is full again;
* OpenAI (https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers):
  ``x-ratelimit-limit|remaining|reset-requests`` and ``-tokens``; ``…-reset`` a duration
  such as ``6m0s`` or ``250ms``.

Input tokens are charged as the reply's usage reports them (a provider counts a request's
tokens once: what its usage says is what its limit took; the servers' ``input_tokens``), or,
for a reply that reports none, counted from the request (:func:`count_input_tokens`: its text,
4 characters a token); output tokens as the reply reports them, charged when the request is
admitted (so an exhausted output bucket refuses the next request, as Anthropic's estimate does).
Besides:

* :meth:`Limits.overload` — the next N requests get 529 ``overloaded_error`` (Anthropic;
  OpenAI-style servers 503) with ``retry-after``;
* :meth:`Limits.outage` — every request for the next N seconds gets that 529 (or 503), without
  ``retry-after`` unless given (Anthropic documents none for 529,
  https://docs.anthropic.com/en/api/errors), then the server recovers;
* ``quota_exhausted`` — every request gets the 429 that says the money ran out, which must not
  be retried (Anthropic: the organisation's spend limit; OpenAI: ``insufficient_quota``,
  https://platform.openai.com/docs/guides/error-codes#api-errors);
* ``context_window`` — a request of more input tokens gets 400 ``invalid_request_error``
  "prompt is too long: N tokens > M maximum" (https://docs.anthropic.com/en/api/errors).

``refused`` counts the requests the gate refused, by reason (``rate_limit``, ``overloaded``,
``quota``, ``context``); ``admitted`` the others, ``charged_input`` the input tokens they took;
``history`` is every request's ``(monotonic time, "admitted" or the reason refused)`` in the
order they came.
"""

from __future__ import annotations

import datetime
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any


def count_input_tokens(body: Any) -> int:
    """The input tokens of a request ``body`` (parsed JSON) as the fake counts them: the
    characters of its ``system``, ``messages`` and ``tools`` as JSON, four to a token."""
    body = body if isinstance(body, dict) else {}
    text = json.dumps([body.get("system"), body.get("messages"), body.get("tools")], ensure_ascii=False)
    return max(1, math.ceil(len(text) / 4))


class Bucket:
    """A token bucket of ``limit`` tokens refilled at ``limit / window`` per second (starts full)."""

    def __init__(self, limit: int, window: float):
        self.limit, self.rate = limit, limit / window
        self.level, self.at = float(limit), time.monotonic()

    def refill(self, now: float) -> None:
        """Add what ``now - last`` seconds refilled, up to ``limit``."""
        self.level = min(float(self.limit), self.level + (now - self.at) * self.rate)
        self.at = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` (at most ``limit``) is there; 0 if it is now."""
        need = min(amount, float(self.limit)) - self.level
        return max(0.0, need / self.rate)

    def reset_in(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.limit - self.level) / self.rate)


@dataclass
class Snapshot:
    """The state the headers of one response tell: per dimension (``requests``,
    ``input_tokens``, ``output_tokens``) ``(limit, remaining, seconds until full)``."""

    dims: dict[str, tuple[int, int, float]] = field(default_factory=dict)


@dataclass
class Refusal:
    """Why the gate refused a request: ``reason`` (``rate_limit``, ``overloaded``, ``quota``,
    ``context``), ``status``, error ``type`` and ``message``, ``retry_after`` seconds (or None)."""

    reason: str
    status: int
    type: str
    message: str
    retry_after: float | None = None


class Limits:
    """The gate; see the module doc.

    ``requests``, ``input_tokens``, ``output_tokens``: the limit of each per ``window`` seconds
    (None: no limit); ``retry_after_ms``: also send ``retry-after-ms``; ``context_window``: the
    most input tokens a request may have; ``quota_exhausted``: refuse everything as out of money.
    Thread-safe (the fake answers each request in its own thread).
    """

    def __init__(self, *, requests: int | None = None, input_tokens: int | None = None,
                 output_tokens: int | None = None, window: float = 60.0, retry_after_ms: bool = False,
                 context_window: int | None = None, quota_exhausted: bool = False):
        self.buckets = {name: Bucket(limit, window) for name, limit in
                        (("requests", requests), ("input_tokens", input_tokens), ("output_tokens", output_tokens))
                        if limit is not None}
        self.retry_after_ms, self.context_window, self.quota_exhausted = retry_after_ms, context_window, quota_exhausted
        self.refused: dict[str, int] = {}
        self.admitted = 0
        self.charged_input = 0
        self.history: list[tuple[float, str]] = []
        self._overloads: list[float] = []
        self._outage: tuple[float, float | None] = (float("-inf"), None)
        self._lock = threading.Lock()

    def overload(self, count: int = 1, retry_after: float = 1.0) -> Limits:
        """The next ``count`` requests get 529 ``overloaded_error`` with ``retry-after``; returns ``self``."""
        with self._lock:
            self._overloads.extend([retry_after] * count)
        return self

    def outage(self, seconds: float, retry_after: float | None = None) -> float:
        """Every request for the next ``seconds`` gets 529 ``overloaded_error`` (with ``retry-after``
        only when given); returns the monotonic time it recovers."""
        with self._lock:
            self._outage = (time.monotonic() + seconds, retry_after)
            return self._outage[0]

    @property
    def refused_total(self) -> int:
        """Every refused request, whatever the reason."""
        with self._lock:
            return sum(self.refused.values())

    def admit(self, body: Any, output_tokens: int, input_tokens: int | None = None) -> tuple[Refusal | None, Snapshot]:
        """Take the request ``body`` whose reply will report ``output_tokens`` and ``input_tokens``
        (None: counted from ``body``), or refuse it; returns the refusal (None when admitted) and
        the snapshot for the response's headers."""
        tokens = count_input_tokens(body)
        charge_input = tokens if input_tokens is None else input_tokens
        with self._lock:
            now = time.monotonic()
            for bucket in self.buckets.values():
                bucket.refill(now)
            refusal = self._refusal(tokens, now)
            if refusal is None:
                need = {"requests": 1, "input_tokens": charge_input, "output_tokens": 1}
                wait = max((b.wait_for(need[name]) for name, b in self.buckets.items()), default=0.0)
                if wait > 0:
                    refusal = Refusal("rate_limit", 429, "rate_limit_error",
                                      "This request would exceed your organization's rate limit. "
                                      "Please try again later.", wait)
                else:
                    charge = {"requests": 1, "input_tokens": charge_input, "output_tokens": output_tokens}
                    for name, bucket in self.buckets.items():
                        bucket.level -= charge[name]
                    self.admitted += 1
                    self.charged_input += charge_input
            if refusal is not None:
                self.refused[refusal.reason] = self.refused.get(refusal.reason, 0) + 1
            self.history.append((now, "admitted" if refusal is None else refusal.reason))
            snapshot = Snapshot({name: (b.limit, max(0, math.floor(b.level)), b.reset_in())
                                 for name, b in self.buckets.items()})
        return refusal, snapshot

    def _refusal(self, tokens: int, now: float) -> Refusal | None:
        if self.quota_exhausted:
            return Refusal("quota", 429, "rate_limit_error",
                           "enforced_spend_limit_reached: your organization has reached its monthly spend "
                           "limit; raise it in the console to continue")
        if self.context_window is not None and tokens > self.context_window:
            return Refusal("context", 400, "invalid_request_error",
                           f"prompt is too long: {tokens} tokens > {self.context_window} maximum")
        if self._overloads:
            return Refusal("overloaded", 529, "overloaded_error", "Overloaded", self._overloads.pop(0))
        if now < self._outage[0]:
            return Refusal("overloaded", 529, "overloaded_error", "Overloaded", self._outage[1])
        return None

    def retry_headers(self, refusal: Refusal) -> dict[str, str]:
        """``retry-after`` (whole seconds, rounded up) and optionally ``retry-after-ms`` of ``refusal``."""
        if refusal.retry_after is None:
            return {}
        headers = {"retry-after": str(max(1, math.ceil(refusal.retry_after)))}
        if self.retry_after_ms:
            headers["retry-after-ms"] = str(max(1, math.ceil(refusal.retry_after * 1000)))
        return headers


ANTHROPIC_DIMS = {"requests": "requests", "input_tokens": "input-tokens", "output_tokens": "output-tokens"}


def anthropic_headers(snapshot: Snapshot) -> dict[str, str]:
    """The ``anthropic-ratelimit-*`` headers of ``snapshot`` (``…-reset`` in RFC 3339, UTC)."""
    headers = {}
    for dim, (limit, remaining, reset_in) in snapshot.dims.items():
        prefix = f"anthropic-ratelimit-{ANTHROPIC_DIMS[dim]}"
        reset = datetime.datetime.fromtimestamp(math.ceil(time.time() + reset_in), datetime.timezone.utc)
        headers.update({f"{prefix}-limit": str(limit), f"{prefix}-remaining": str(remaining),
                        f"{prefix}-reset": reset.isoformat(timespec="seconds").replace("+00:00", "Z")})
    return headers


def openai_duration(seconds: float) -> str:
    """A duration as OpenAI's reset headers write it: ``6m0s``, ``1s``, ``250ms``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    rest = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{rest}s" if minutes else f"{rest}s"


def openai_headers(snapshot: Snapshot) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of ``snapshot`` (``-tokens`` from the input-token bucket)."""
    headers = {}
    for dim, name in (("requests", "requests"), ("input_tokens", "tokens")):
        if dim in snapshot.dims:
            limit, remaining, reset_in = snapshot.dims[dim]
            headers.update({f"x-ratelimit-limit-{name}": str(limit), f"x-ratelimit-remaining-{name}": str(remaining),
                            f"x-ratelimit-reset-{name}": openai_duration(reset_in)})
    return headers


__all__ = ["Bucket", "Limits", "Refusal", "Snapshot", "anthropic_headers", "count_input_tokens",
           "openai_duration", "openai_headers"]
