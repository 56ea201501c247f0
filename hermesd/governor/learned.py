"""One limit as the provider's rate-limit headers tell it, kept as the provider keeps it: a token bucket.

Anthropic's limits are token buckets that refill continuously ("your capacity is continuously
replenished up to your maximum limit, rather than being reset at fixed intervals",
https://docs.anthropic.com/en/api/rate-limits), and ``anthropic-ratelimit-*-reset`` is the time
at which the limit is *fully* replenished, not the time the next unit frees.  So each response
telling ``limit``, ``remaining`` and ``reset`` gives:

* **the refill rate**: the bucket lacked ``limit - remaining`` units and is full ``reset`` seconds
  after the call was granted, so a unit takes ``reset / (limit - remaining)`` seconds.  The reset
  comes in whole seconds and ``remaining`` in whole units, so the rate is fitted over the
  responses (least squares through the origin, each earlier response weighing :data:`DECAY` as
  much as the next);
* **what the bucket holds** (:meth:`LearnedLimit.level`): each response's ``remaining`` (the
  bucket when its call was admitted, rounded down to the unit) less the units granted since,
  plus at most what refilled since its call was granted, and one for the rounding.  The model —
  counted down by every grant, refilled at the fitted rate — is kept while it lies within those
  bounds and moved to the nearer bound when it does not (another client of the key, a rate still
  being learned).  The level is anchored on ``remaining``, not on the reset, as the reset is off
  by up to a second and an error of the fitted rate grows with the time to full.

A call needing ``n`` units goes when the bucket holds them: at 20 requests per 10 s with the
bucket empty, one every half second rather than twenty once it is full again.  Until a rate is known (every response so far said the bucket was full) the limit
is counted down from ``remaining``; used up, it waits for its reset, or for a response in flight
to tell more.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermesd.governor.headers import Dim

DECAY = 0.8
"""The weight of the fit so far against each new response's (older responses count less)."""

POLL_SECONDS = 0.2
"""How long a call waits for a response in flight to tell more of a used-up limit."""


@dataclass
class LearnedLimit:
    """One dimension (``name``: ``requests``, ``tokens``, ``input_tokens``, ``output_tokens``) of
    one limiter, in the provider's units.

    ``limit`` told (None: not told); ``per_unit``: seconds the provider takes to refill one unit
    (None until a response said the bucket lacked any); ``units`` in the bucket at monotonic
    ``at`` — refilled from then at ``per_unit`` once it is known (``at`` not None), else counted
    down from the newest response (``seq``: the grant whose response it was) until ``reset_at``
    (monotonic), when it is full again.
    """

    name: str
    limit: int | None = None
    per_unit: float | None = None
    units: float = 0.0
    at: float | None = None
    reset_at: float = float("-inf")
    seq: int = -1
    fit: tuple[float, float] = (0.0, 0.0)
    """The least-squares sums (reset × lacking, lacking²) behind ``per_unit``."""

    def observe(self, dim: Dim, seq: int, since: float, granted_at: float, now: float) -> None:
        """A response told ``dim`` (its ``reset`` relative to ``now``) for the call granted as ``seq``
        at ``granted_at``; ``since``: the units granted after that call (its response does not
        count them yet)."""
        if dim.remaining is None or dim.reset is None:
            return
        if dim.limit != self.limit:  # another limit (or none told): what was fitted is of another bucket
            self.limit, self.per_unit, self.at, self.fit = dim.limit, None, None, (0.0, 0.0)
        told = now + dim.reset
        lacking = (self.limit or 0) - dim.remaining
        if self.limit and lacking >= 1 and told > granted_at:
            products, squares = self.fit
            self.fit = (DECAY * products + (told - granted_at) * lacking, DECAY * squares + lacking * lacking)
            self.per_unit = self.fit[0] / self.fit[1]
        if self.per_unit is not None:
            least = dim.remaining - since  # as if admitted just now: nothing refilled since
            most = min(float(self.limit), dim.remaining + 1 + max(0.0, now - granted_at) / self.per_unit) - since
            self.units = least if self.at is None else min(most, max(least, self.level(now)))
            self.at = now
        elif seq >= self.seq:
            self.units, self.reset_at = dim.remaining - since, told
        self.seq = max(self.seq, seq)

    def paced(self) -> bool:
        """True when the limit is paced as a bucket (its size and refill rate are known)."""
        return self.at is not None

    def level(self, now: float) -> float:
        """The units in the bucket at ``now`` (below zero: a call larger than the bucket owes)."""
        if self.at is None:
            return self.units
        return min(float(self.limit), self.units + max(0.0, now - self.at) / self.per_unit)

    def take(self, amount: float, now: float) -> None:
        """A call granted at ``now`` takes ``amount`` units."""
        self.units = self.level(now) - amount
        if self.at is not None:
            self.at = now

    def wait(self, need: float, now: float, in_flight: bool) -> tuple[float, str] | None:
        """``(seconds, reason)`` a call needing ``need`` units waits (a call larger than the bucket
        waits for it full), None when it may go; ``in_flight``: calls whose responses will tell more."""
        what = self.name.replace("_", " ")
        if self.at is not None:
            need = min(need, float(self.limit))
            level = self.level(now)
            if level >= need:
                return None
            return (need - level) * self.per_unit, f"the provider says no {what} remain until its bucket refills"
        if self.reset_at <= now:
            if not self.limit:
                return None  # what it said is over, and there is nothing to count from
            self.units, self.reset_at = float(self.limit), float("inf")  # replenished
        if self.units > 0 and self.units >= min(need, self.limit or 0):
            return None
        if self.reset_at == float("inf"):  # used up since it was full: the next response will tell
            return (POLL_SECONDS, f"the provider's {what} are used up until a response tells more") if in_flight else None
        return self.reset_at - now, f"the provider says no {what} remain until its reset"

    def spent(self, now: float) -> tuple[float, float, str] | None:
        """``(until, over, reason)`` while not one unit remains: ``until`` the next unit is there,
        ``over`` when the bucket is full again (monotonic); None otherwise."""
        what = self.name.replace("_", " ")
        if self.at is not None:
            level = self.level(now)
            if level >= 1:
                return None
            return (now + (1 - level) * self.per_unit, now + (self.limit - level) * self.per_unit,
                    f"the provider says no {what} remain until its bucket refills")
        if self.units < 1 and now < self.reset_at < float("inf"):
            return self.reset_at, self.reset_at, f"the provider says no {what} remain until its reset"
        return None
