"""The limiter of one provider endpoint and key: may this model call go now, or how long to wait.

Four things decide, all on monotonic seconds (``now`` passed in, so tests drive the clock):

* **configured limits** (``governor.providers`` in the config) as token buckets: requests,
  input tokens and output tokens per minute, refilled continuously, holding at most one second's
  worth (at least one call) so that calls are spread over the minute rather than sent in a
  burst — Anthropic enforces a per-minute limit over shorter intervals too ("60 RPM may be
  enforced as 1 request per second", https://docs.anthropic.com/en/api/rate-limits).  A call
  takes its estimated input tokens and its ``max_tokens`` of output; the unused output is given
  back when it ends.  A call larger than a bucket goes when the bucket is full (then owes);
* **learned limits** (:mod:`hermesd.governor.learned`): the rate-limit headers of every
  response say what remains and when the limit is full again; each limit is paced as the token
  bucket the provider keeps, its refill rate fitted from the headers, each grant taking its part
  — a call goes when the bucket holds what it needs, not once the bucket is full;
* **refusals** (:mod:`hermesd.governor.backoff`): a 429 or 529 (or an overload mid-stream)
  pauses the endpoint for every child — one pause for the calls refused together, for the
  ``retry-after`` given, else for the time the headers say the next unit frees, else 1, 2, 4 …
  s, the step growing only when the probe (the one call let through after a pause, the rest
  waiting for its answer) is refused again and reset by a success;
* **concurrency**, adaptive, as TCP's congestion window (RFC 5681 §3.1): it starts at
  :data:`INITIAL_WINDOW` calls in flight, or at a configured ``max_concurrent`` (TCP's larger
  initial window, RFC 6928: one long call —
  a minute of thinking — must not hold every other job of the key; the first responses' headers
  say what the provider allows before a bigger burst can be refused) and grows by one per call
  that went well (slow start) until the first refusal; from
  then on additive increase, multiplicative decrease (AIMD): each call that went well adds
  ``1/window``, the first pause of a run of refusals halves the window (the probes refused after
  it say nothing of concurrency); always between 1 and ``max_concurrent`` (or
  :data:`DEFAULT_MAX_CONCURRENT`).

Input tokens are counted in the provider's tokens: the child's estimate scaled by what the
provider's usage reported of the calls so far (:attr:`Limiter.input_scale`).

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

from dataclasses import dataclass, field
from typing import Any

from hermesd.governor.backoff import Backoff
from hermesd.governor.headers import Learned
from hermesd.governor.learned import LearnedLimit

INITIAL_WINDOW = 4.0
"""Calls in flight per endpoint and key before anything was learned (at most ``max_concurrent``)."""

DEFAULT_MAX_CONCURRENT = 64
"""Calls in flight per endpoint and key when no ``max_concurrent`` is configured (the window's ceiling)."""

CONCURRENCY_POLL_SECONDS = 0.2
"""How long a child at the concurrency window waits before it asks again."""

MAX_WAIT_SECONDS = 30.0
"""The longest wait told at once: a waiter asks again at least this often (and keeps its place)."""

STALE_SECONDS = 5.0
"""A waiter this long past the time it was told to ask again is passed over by the queue."""

FORGET_SECONDS = 120.0
"""A waiter this long past the time it was told to ask again leaves the queue."""


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
    ``input`` tokens and the ``output`` (``max_tokens``) it took, ``at`` (monotonic),
    ``cumulative_input``: the provider's input tokens granted up to it (:attr:`Limiter.granted_input`)."""

    id: str
    job: str
    seq: int
    input: int
    output: int
    at: float
    cumulative_input: float = 0.0


@dataclass
class Waiter:
    """A place in the queue: ``since`` (monotonic) it first asked, ``until`` (monotonic) it was
    told to ask again, ``reason`` it waits (for those behind it)."""

    since: float
    until: float
    reason: str = ""


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
    backoff: Backoff = field(default_factory=Backoff)
    learned: dict[str, LearnedLimit] = field(default_factory=dict)
    seq: int = 0
    granted_input: float = 0.0
    input_scale: float = 1.0
    """The provider's input tokens per estimated one (learned from the usage of calls that went well)."""
    refusals: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    slow_start: bool = True
    queue: dict[str, Waiter] = field(default_factory=dict)
    announced_until: float = 0.0
    """Until when a pause of the headers has been announced (``governor.paused``; monotonic)."""
    began: bool = False
    """True when the last report began a pause (for :meth:`Governor._announce`)."""

    STATE = ("in_flight", "backoff", "learned", "seq", "granted_input", "input_scale", "refusals", "counts",
             "slow_start", "queue", "announced_until")
    """What was learned, kept when a reload changes the configured limits."""

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

    @property
    def paused_until(self) -> float:
        """The end of the current pause after a refusal (monotonic; in the past: none)."""
        return self.backoff.until

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
        charged = input_tokens * self.input_scale
        wait, reason = self._wait(charged, max_tokens, now)
        if wait > 0:
            return self._queued(job, wait, reason, now)
        self.queue.pop(job, None)
        for name, bucket in self.buckets.items():
            bucket.level -= {"requests": 1, "input_tokens": charged, "output_tokens": max_tokens}[name]
        for name, learning in self.learned.items():
            learning.take(_charge(name, charged), now)
        self.seq += 1
        self.granted_input += charged
        grant = Grant(grant_id, job, self.seq, input_tokens, max_tokens, now, self.granted_input)
        self.in_flight[grant_id] = grant
        self.backoff.granted(grant_id, now)
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

    def _wait(self, charged: float, max_tokens: int, now: float) -> tuple[float, str]:
        """Seconds a call of ``charged`` input tokens (the provider's) must wait, and why (0: none)."""
        wait, reason = self.backoff.wait(now)
        if wait > 0:
            return wait, reason
        window = max(1, int(self.window))
        if len(self.in_flight) >= window:
            return CONCURRENCY_POLL_SECONDS, (f"at its concurrency window ({window} call{'s' if window != 1 else ''} "
                                              "in flight)")
        need = {"requests": 1, "input_tokens": charged, "output_tokens": max_tokens}
        for name, bucket in self.buckets.items():
            bucket.refill(now)
            wait = bucket.wait(need[name])
            if wait > 0:
                return wait, f"the configured {name.replace('_', ' ')} per minute"
        return self._learned_wait(charged, now) or (0.0, "")

    def _learned_wait(self, charged: float, now: float, buckets: bool = False) -> tuple[float, str] | None:
        """The longest wait the learned limits (``buckets``: only those paced as buckets) ask of a
        call of ``charged`` input tokens (None: none)."""
        waits = [w for name, learning in self.learned.items() if learning.paced() or not buckets
                 if (w := learning.wait(_charge(name, charged), now, bool(self.in_flight))) is not None]
        return max(waits) if waits else None

    # learning ---------------------------------------------------------------

    def done(self, grant_id: str, outcome: str, learned: Learned, usage: dict[str, Any], now: float) -> Grant | None:
        """The call of ``grant_id`` ended with ``outcome`` (:data:`hermesd.governor.OUTCOMES`), its response's
        headers read as ``learned`` and its ``usage`` (``input``, ``output``, ``cache_read``
        tokens); returns its grant (None if unknown: released already).  :attr:`began` says
        whether it began a pause."""
        grant = self.in_flight.pop(grant_id, None)
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if grant is not None and "output_tokens" in self.buckets:
            unused = grant.output - int(usage.get("output") or 0) if outcome == "ok" else grant.output
            self.buckets["output_tokens"].level += max(0, unused)
        self._learn(grant, learned, now)
        refused = outcome in ("rate_limited", "overloaded")
        seq = grant.seq if grant is not None else self.seq
        self.began = False
        if refused:
            self.refusals += 1
            self._refused(seq, outcome, learned, grant, now)
        elif outcome == "ok":
            self.backoff.succeeded(seq)
            grow = 1.0 if self.slow_start else 1.0 / max(1.0, self.window)
            self.window = min(float(self.ceiling()), self.window + grow)
            if grant is not None:
                self._scale(grant, usage)
        self.backoff.ended(grant_id, refused)
        return grant

    def release(self, grant_id: str) -> None:
        """Forget a grant whose call will not report (its job ended)."""
        self.in_flight.pop(grant_id, None)
        self.backoff.released(grant_id)

    def _scale(self, grant: Grant, usage: dict[str, Any]) -> None:
        """Learn the provider's input tokens per estimated one from a call's ``usage`` (cache reads
        left out: Anthropic counts them against no input-token limit of current models)."""
        used = int(usage.get("input") or 0) - int(usage.get("cache_read") or 0)
        if grant.input > 0 and used > 0:
            ratio = min(1000.0, max(0.001, used / grant.input))
            self.input_scale = ratio if self.counts.get("ok", 0) <= 1 else 0.8 * self.input_scale + 0.2 * ratio

    def _learn(self, grant: Grant | None, learned: Learned, now: float) -> None:
        seq = grant.seq if grant is not None else self.seq
        since_input = self.granted_input - (grant.cumulative_input if grant is not None else self.granted_input)
        since = {"requests": self.seq - seq, "tokens": since_input, "input_tokens": since_input}
        for name, dim in learned.dims.items():
            learning = self.learned.setdefault(name, LearnedLimit(name))
            learning.observe(dim, seq, since.get(name, 0), grant.at if grant is not None else now, now)

    def _refused(self, seq: int, outcome: str, learned: Learned, grant: Grant | None, now: float) -> None:
        hint = None
        if learned.retry_after is None and outcome == "rate_limited":  # the headers may say when a unit frees
            charged = grant.input * self.input_scale if grant is not None else 0.0
            told = self._learned_wait(charged, now, buckets=True)
            hint = told[0] if told is not None else learned.exhausted_for()
        what = "rate limit (429)" if outcome == "rate_limited" else "overloaded"
        if self.backoff.refused(seq, self.seq, what, learned.retry_after, now, hint):
            self.began = True
            if self.backoff.strikes == 1:  # the first pause of a run of refusals (not a probe's)
                self.window = max(1.0, self.window / 2)
            self.slow_start = False

    def pause(self, now: float) -> tuple[float, float, str] | None:
        """``(until, over, reason)`` while the endpoint waits for every call: a pause after a
        refusal (``over`` = ``until``, monotonic), else a limit the headers said has nothing left
        (``until`` its next unit is there, ``over`` when it is full again); None."""
        if self.backoff.until > now:
            return self.backoff.until, self.backoff.until, self.backoff.reason
        spent = [s for learning in self.learned.values() if (s := learning.spent(now)) is not None]
        return max(spent) if spent else None

    def describe(self, now: float) -> dict[str, Any]:
        """The limiter for ``status``: ``endpoint`` (label), ``in_flight``, ``concurrency`` (the
        window), ``paused_seconds`` and ``reason`` while paused, ``calls`` by outcome,
        ``configured`` limits, and ``remaining``: what the provider's headers said is left of
        each dimension (``{name: {remaining, limit, reset_seconds}}``, as counted since)."""
        out: dict[str, Any] = {"endpoint": self.label, "in_flight": len(self.in_flight),
                               "concurrency": round(self.window, 2), "calls": dict(self.counts),
                               "configured": {k: v for k, v in (("requests_per_minute", self.rpm),
                                                                ("input_tokens_per_minute", self.itpm),
                                                                ("output_tokens_per_minute", self.otpm),
                                                                ("max_concurrent", self.max_concurrent)) if v}}
        told = {name: {"remaining": int(max(0.0, dim.level(now))), "limit": dim.limit,
                       "reset_seconds": round(max(0.0, dim.reset_at - now), 3) if dim.reset_at > now else 0.0}
                for name, dim in self.learned.items() if dim.limit is not None}
        if told:
            out["remaining"] = told
        if self.backoff.until > now:
            out.update(paused_seconds=round(self.backoff.until - now, 3), reason=self.backoff.reason)
        return out


def _charge(name: str, input_tokens: float) -> float:
    """What one granted call is counted against a learned dimension before its response tells."""
    return {"requests": 1, "tokens": input_tokens, "input_tokens": input_tokens}.get(name, 0)


def jitter(seconds: float) -> float:
    """``seconds`` plus a random 0–10 % (at least 0–50 ms)."""
    import random  # here: the daemon loads it at its first use (hermesd.daemon.DEFERRED)

    return seconds + random.uniform(0.0, max(0.05, seconds * 0.1))
