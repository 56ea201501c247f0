"""The limiter of one provider endpoint and key: may this model call go now, or how long to wait.

Three things decide, all on monotonic seconds (``now`` passed in, so tests drive the clock):

* **configured limits** (``governor.providers`` in the config) as token buckets: requests,
  input tokens and output tokens per minute, refilled continuously, holding at most one second's
  worth (at least one call) so that calls are spread over the minute rather than sent in a
  burst — Anthropic enforces a per-minute limit over shorter intervals too ("60 RPM may be
  enforced as 1 request per second", https://docs.anthropic.com/en/api/rate-limits).  A call
  takes its estimated input tokens and its ``max_tokens`` of output; the unused output is given
  back when it ends.  A call larger than a bucket goes when the bucket is full (then owes);
* **learned limits**: a 429 or 529 (or an overload mid-stream) pauses the endpoint for every
  child for the ``retry-after`` given (else an exponential backoff from 1 s up to 60 s); the
  rate-limit headers of every response say what remains and when it is replenished, and a
  dimension with nothing left waits for its reset.  What remains is counted down by the calls
  granted after the one whose response said it, and its reset pushed back by what each grant
  takes at the refill rate the headers imply;
* **concurrency**, adaptive, as TCP's congestion window (RFC 5681 §3.1): it starts at
  :data:`INITIAL_WINDOW` calls in flight, or at a configured ``max_concurrent`` (TCP's larger
  initial window, RFC 6928: one long call —
  a minute of thinking — must not hold every other job of the key; the first responses' headers
  say what the provider allows before a bigger burst can be refused) and grows by one per call
  that went well (slow start) until the first refusal; from
  then on additive increase, multiplicative decrease (AIMD): each call that went well adds
  ``1/window``, a refused one halves the window (at most once a second); always between 1 and
  ``max_concurrent`` (or :data:`DEFAULT_MAX_CONCURRENT`).  Once a told reset has passed, the
  dimension counts down from its full limit again until a response tells more.

Waiters are served in order (first come, first served, as a ticket queue): a job told to wait
joins the limiter's :attr:`Limiter.queue` and keeps its place while it keeps asking; only the
head of the queue may be granted a call, so what frees up is reserved for it, and a job asking
later (or coming back sooner from a shorter jitter) is told to wait behind it.  A waiter that
does not ask again within :data:`STALE_SECONDS` of the time it was told is passed over (its
child is stopped or slow; it keeps its place should it ask again) and forgotten after
:data:`FORGET_SECONDS`.  A job is one place in the queue (its calls are made one at a time).

Waits carry jitter (up to 10 %, at least 50 ms), so children told to wait the same time do not
all come back in the same instant; no wait told is longer than :data:`MAX_WAIT_SECONDS`, so a
waiter asks again at least that often.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hermesd.governor.headers import Learned

INITIAL_WINDOW = 4.0
"""Calls in flight per endpoint and key before anything was learned (at most ``max_concurrent``)."""

DEFAULT_MAX_CONCURRENT = 64
"""Calls in flight per endpoint and key when no ``max_concurrent`` is configured (the window's ceiling)."""

CONCURRENCY_POLL_SECONDS = 0.2
"""How long a child at the concurrency window waits before it asks again."""

BACKOFF_SECONDS = (1.0, 60.0)
"""First and longest pause after a refusal that gave no ``retry-after`` (doubling in between)."""

MAX_WAIT_SECONDS = 30.0
"""The longest wait told at once: a waiter asks again at least this often (and keeps its place)."""

STALE_SECONDS = 5.0
"""A waiter this long past the time it was told to ask again is passed over by the queue."""

FORGET_SECONDS = 120.0
"""A waiter this long past the time it was told to ask again leaves the queue."""

OUTCOMES = ("ok", "rate_limited", "overloaded", "quota", "error")
"""What a child reports of a call: it went well; refused by the rate limit (429); the provider
was overloaded (529, 503, an ``overloaded_error`` mid-stream); the money ran out (not retried);
any other failure."""


class Bucket:
    """A token bucket: ``rate`` tokens per second up to ``capacity`` (starts full).

    ``level`` may go below zero: a call larger than the bucket owes what it took.
    """

    def __init__(self, rate: float, capacity: float, now: float):
        self.rate, self.capacity, self.level, self.at = rate, capacity, capacity, now

    def refill(self, now: float) -> None:
        """Add what passed since the last refill (up to ``capacity``)."""
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def wait(self, amount: float) -> float:
        """Seconds until ``amount`` may be taken (0: now); an amount over the capacity waits for a full bucket."""
        need = min(amount, self.capacity) - self.level
        return max(0.0, need / self.rate) if self.rate > 0 else 0.0


@dataclass
class Grant:
    """One call allowed: ``id``, the ``job`` it is for, ``seq`` (granting order), the estimated
    ``input`` tokens and the ``output`` (``max_tokens``) it took, ``at`` (monotonic)."""

    id: str
    job: str
    seq: int
    input: int
    output: int
    at: float
    cumulative_input: int = 0


@dataclass
class Waiter:
    """A place in the queue: ``since`` (monotonic) it first asked, ``until`` (monotonic) it was
    told to ask again, ``reason`` it waits (for those behind it)."""

    since: float
    until: float
    reason: str = ""


@dataclass
class Learning:
    """What the headers said of one dimension: ``remaining`` after the grant of ``seq``
    (counted down by the grants since), until monotonic ``reset_at`` when the dimension is
    full again (``limit``, when told; then counted down from it until the next response tells)."""

    remaining: float
    reset_at: float
    seq: int
    limit: int | None = None
    per_unit: float | None = None
    """Seconds the provider takes to refill one unit (from the headers), when known."""

    def take(self, amount: float) -> None:
        """A call granted: ``amount`` less remains, and the dimension is full that much later."""
        self.remaining -= amount
        if self.per_unit is not None and self.reset_at != float("inf"):
            self.reset_at += amount * self.per_unit


@dataclass
class Limiter:
    """Limits of one endpoint and key; see the module doc.

    ``label``: how it is shown (``anthropic https://api.anthropic.com key 3f2a…``);
    ``rpm``/``itpm``/``otpm``: configured limits per minute (None: none); ``max_concurrent``:
    the window's ceiling.
    """

    label: str
    rpm: float | None = None
    itpm: float | None = None
    otpm: float | None = None
    max_concurrent: int | None = None
    now: float = 0.0
    buckets: dict[str, Bucket] = field(default_factory=dict)
    window: float = 0.0
    in_flight: dict[str, Grant] = field(default_factory=dict)
    paused_until: float = 0.0
    pause_reason: str = ""
    learned: dict[str, Learning] = field(default_factory=dict)
    seq: int = 0
    granted_input: int = 0
    refusals: int = 0
    strikes: int = 0
    decreased_at: float = float("-inf")
    counts: dict[str, int] = field(default_factory=dict)
    slow_start: bool = True
    queue: dict[str, Waiter] = field(default_factory=dict)
    announced_until: float = 0.0
    """The end of the pause last announced (``governor.paused``; monotonic)."""

    def __post_init__(self) -> None:
        for name, per_minute in (("requests", self.rpm), ("input_tokens", self.itpm), ("output_tokens", self.otpm)):
            if per_minute:
                rate = per_minute / 60.0
                self.buckets[name] = Bucket(rate, max(1.0, rate), self.now)
        # a configured max_concurrent is what the operator knows the key allows: the window starts there
        self.window = float(self.max_concurrent) if self.max_concurrent else min(INITIAL_WINDOW, float(self.ceiling()))

    def ceiling(self) -> int:
        """The most calls in flight the window may grow to."""
        return self.max_concurrent or DEFAULT_MAX_CONCURRENT

    # asking -----------------------------------------------------------------

    def ask(self, job: str, grant_id: str, input_tokens: int, max_tokens: int, now: float) -> Grant | tuple[float, str]:
        """A :class:`Grant` for a call of ``input_tokens`` (estimated) and ``max_tokens``, or
        ``(seconds, reason)`` to wait (with jitter, at most :data:`MAX_WAIT_SECONDS`): ``job``
        waits behind the jobs that were told to wait before it (the module doc)."""
        head = self.head(now)
        if head is not None and head != job:
            first = self.queue[head]
            wait = max(CONCURRENCY_POLL_SECONDS, first.until - now)
            return self._queued(job, wait, f"{first.reason} (served in order: earlier calls go first)", now)
        wait, reason = self._wait(input_tokens, max_tokens, now)
        if wait > 0:
            return self._queued(job, wait, reason, now)
        self.queue.pop(job, None)
        for name, bucket in self.buckets.items():
            bucket.level -= {"requests": 1, "input_tokens": input_tokens, "output_tokens": max_tokens}[name]
        for name, learning in self.learned.items():
            learning.take(_charge(name, input_tokens))
        self.seq += 1
        self.granted_input += input_tokens
        grant = Grant(grant_id, job, self.seq, input_tokens, max_tokens, now, self.granted_input)
        self.in_flight[grant_id] = grant
        return grant

    def head(self, now: float) -> str | None:
        """The job first in the queue that still asks (None: nobody waits); forgets long-gone waiters."""
        for job, waiter in list(self.queue.items()):
            if now - waiter.until > FORGET_SECONDS:
                del self.queue[job]
            elif now - waiter.until <= STALE_SECONDS:
                return job
        return None

    def _queued(self, job: str, wait: float, reason: str, now: float) -> tuple[float, str]:
        """``job`` told to wait ``wait`` seconds (plus jitter) for ``reason``: it keeps or takes its place."""
        told = min(MAX_WAIT_SECONDS, jitter(wait))
        waiter = self.queue.setdefault(job, Waiter(now, now + told))
        waiter.until, waiter.reason = now + told, reason
        return told, reason

    def leave(self, job: str) -> None:
        """``job`` waits no more (it ended)."""
        self.queue.pop(job, None)

    def _wait(self, input_tokens: int, max_tokens: int, now: float) -> tuple[float, str]:
        if self.paused_until > now:
            return self.paused_until - now, self.pause_reason
        if len(self.in_flight) >= max(1, int(self.window)):
            return CONCURRENCY_POLL_SECONDS, f"at its concurrency window ({max(1, int(self.window))} calls in flight)"
        need = {"requests": 1, "input_tokens": input_tokens, "output_tokens": max_tokens}
        for name, bucket in self.buckets.items():
            bucket.refill(now)
            wait = bucket.wait(need[name])
            if wait > 0:
                return wait, f"the configured {name.replace('_', ' ')} per minute"
        for name, learning in list(self.learned.items()):
            if learning.reset_at <= now:
                if learning.limit is None:
                    del self.learned[name]  # what it said is over, and there is nothing to count from
                    continue
                learning.remaining, learning.reset_at = float(learning.limit), float("inf")  # replenished
            if learning.remaining > 0 and learning.remaining >= min(_charge(name, input_tokens), learning.limit or 0):
                continue
            what = name.replace("_", " ")
            if learning.reset_at == float("inf"):  # used up since it was full: the next response will tell
                if self.in_flight:
                    return CONCURRENCY_POLL_SECONDS, f"the provider's {what} are used up until a response tells more"
                continue  # nothing in flight to tell: one call finds out
            return learning.reset_at - now, f"the provider says no {what} remain until its reset"
        return 0.0, ""

    # learning ---------------------------------------------------------------

    def done(self, grant_id: str, outcome: str, learned: Learned, usage: dict[str, Any], now: float) -> Grant | None:
        """The call of ``grant_id`` ended with ``outcome`` (:data:`OUTCOMES`), its response's
        headers read as ``learned`` and its ``usage`` (``output`` tokens); returns its grant
        (None if unknown: released already)."""
        grant = self.in_flight.pop(grant_id, None)
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if grant is not None and "output_tokens" in self.buckets:
            unused = grant.output - int(usage.get("output") or 0) if outcome == "ok" else grant.output
            self.buckets["output_tokens"].level += max(0, unused)
        self._learn(grant, learned, now)
        if outcome in ("rate_limited", "overloaded"):
            self.refusals += 1
            self._refused(outcome, learned, now)
        elif outcome == "ok":
            self.strikes = 0
            grow = 1.0 if self.slow_start else 1.0 / max(1.0, self.window)
            self.window = min(float(self.ceiling()), self.window + grow)
        return grant

    def release(self, grant_id: str) -> None:
        """Forget a grant whose call will not report (its job ended)."""
        self.in_flight.pop(grant_id, None)

    def _learn(self, grant: Grant | None, learned: Learned, now: float) -> None:
        seq = grant.seq if grant is not None else self.seq
        since_input = self.granted_input - (grant.cumulative_input if grant is not None else self.granted_input)
        since = {"requests": self.seq - seq, "tokens": since_input, "input_tokens": since_input}
        for name, dim in learned.dims.items():
            if dim.remaining is None or dim.reset is None:
                continue
            known = self.learned.get(name)
            if known is not None and known.seq > seq and known.reset_at > now:
                continue  # a later call already told more
            per_unit = known.per_unit if known is not None else None
            deficit = (dim.limit or 0) - dim.remaining
            if dim.limit and deficit >= max(1.0, dim.limit / 4) and dim.reset > 0:
                # the refill rate, averaged (a reset rounded up to the second overstates it, a
                # remaining rounded down understates it)
                seen = dim.reset / deficit
                per_unit = seen if per_unit is None else 0.8 * per_unit + 0.2 * seen
            learning = Learning(dim.remaining, now + dim.reset, seq, dim.limit, per_unit)
            learning.take(since.get(name, 0))  # what the calls granted since take is refilled after
            self.learned[name] = learning

    def _refused(self, outcome: str, learned: Learned, now: float) -> None:
        wait = learned.retry_after
        if wait is None:
            wait = learned.exhausted_for()
        if wait is None:
            first, most = BACKOFF_SECONDS
            wait = min(most, first * 2 ** self.strikes)
            self.strikes += 1
        what = "rate limit (429)" if outcome == "rate_limited" else "overloaded"
        if now + wait > self.paused_until:
            self.paused_until = now + wait
            self.pause_reason = f"the provider answered {what}" + (
                f", retry-after {learned.retry_after:g}s" if learned.retry_after is not None else "")
        if now - self.decreased_at >= 1.0:
            self.window = max(1.0, self.window / 2)
            self.decreased_at = now
        self.slow_start = False

    def pause(self, now: float) -> tuple[float, str] | None:
        """``(until, reason)`` while the endpoint is paused for every call: a 429/529 pause (monotonic
        ``until``), else the latest reset of a dimension the headers said has nothing left; None."""
        if self.paused_until > now:
            return self.paused_until, self.pause_reason
        spent = [(learning.reset_at, name) for name, learning in self.learned.items()
                 if learning.remaining < 1 and now < learning.reset_at < float("inf")]
        if not spent:
            return None
        until, name = max(spent)
        return until, f"the provider says no {name.replace('_', ' ')} remain until its reset"

    def describe(self, now: float) -> dict[str, Any]:
        """The limiter for ``status``: ``endpoint`` (label), ``in_flight``, ``concurrency`` (the
        window), ``paused_seconds`` and ``reason`` while paused, ``calls`` by outcome,
        ``configured`` limits."""
        out: dict[str, Any] = {"endpoint": self.label, "in_flight": len(self.in_flight),
                               "concurrency": round(self.window, 2), "calls": dict(self.counts),
                               "configured": {k: v for k, v in (("requests_per_minute", self.rpm),
                                                                ("input_tokens_per_minute", self.itpm),
                                                                ("output_tokens_per_minute", self.otpm),
                                                                ("max_concurrent", self.max_concurrent)) if v}}
        if self.paused_until > now:
            out.update(paused_seconds=round(self.paused_until - now, 3), reason=self.pause_reason)
        return out


def _charge(name: str, input_tokens: int) -> int:
    """What one granted call is counted against a learned dimension before its response tells."""
    return {"requests": 1, "tokens": input_tokens, "input_tokens": input_tokens}.get(name, 0)


def jitter(seconds: float) -> float:
    """``seconds`` plus a random 0–10 % (at least 0–50 ms)."""
    return seconds + random.uniform(0.0, max(0.05, seconds * 0.1))
