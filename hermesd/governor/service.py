"""The daemon's governor: the limiters of every provider endpoint and key, the grants in flight,
and who waits for what.

Everything here is a few dictionary operations on the event loop (a grant is answered at once,
never awaited); the waiting is the child's.  Keys are never seen: a child names its key by a
hash (``key``: the first hex digits of its SHA-256), which is all that is kept or shown.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Protocol

from hermesd.governor import OUTCOMES, headers
from hermesd.governor.limiter import Grant, Limiter

BUDGET_WAIT_SECONDS = 0.5
"""How long a call waits when the budget it counts against is filled only by calls in flight."""

GRANT_TTL_SECONDS = 1800.0
"""A grant whose call never reported (its child hung) is released after this long."""


class Ledger(Protocol):
    """What the governor asks of the bill before and after each call (``hermesd`` sets
    :attr:`Governor.ledger` when a ledger is kept)."""

    def reserve(self, job_id: str, model: str, provider: str, max_tokens: int, input_estimate: int, *,
                grant_id: str | None = None) -> Any:
        """A refusal (``budget_exceeded``: which budget, spent, limit; with a true ``wait``
        attribute when only calls in flight fill the budget: the child asks again) or None to go
        (the call of ``grant_id`` is then in flight until :meth:`settle`)."""

    def settle(self, job_id: str, grant_id: str, model: str, usage: dict[str, Any]) -> None:
        """What the granted call used (``input``, ``output``, ``cache_write``, ``cache_read`` tokens)."""


class Governor:
    """The limiters of one daemon.

    ``limits(provider, endpoint)``: the configured limits of an endpoint as
    ``(requests_per_minute, input_tokens_per_minute, output_tokens_per_minute, max_concurrent)``
    (None each when not configured); ``clock``: monotonic seconds; ``wall``: epoch seconds
    (to read reset times); ``on_pause(limiter, seconds, reason)``: called once when a pause of an
endpoint begins (after a refusal: once per pause, not per call refused; or headers saying nothing
remains: once until that limit is full again; :meth:`_announce`).
    """

    def __init__(self, limits: Callable[[str, str], tuple[Any, Any, Any, Any]],
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_pause: Callable[[Limiter, float, str], None] | None = None):
        self.limits, self.clock, self.wall, self.on_pause = limits, clock, wall, on_pause
        self.limiters: dict[tuple[str, str, str], Limiter] = {}
        self.grants: dict[str, Limiter] = {}
        self.waiting: dict[str, dict[str, Any]] = {}
        self.ledger: Ledger | None = None
        self._ids = itertools.count(1)

    def limiter(self, provider: str, endpoint: str, key: str) -> Limiter:
        """The limiter of ``endpoint`` and ``key`` (made on first use; its configured limits follow a reload)."""
        configured = tuple(self.limits(provider, endpoint))
        found = self.limiters.get((provider, endpoint, key))
        if found is None or (found.rpm, found.itpm, found.otpm, found.max_concurrent) != configured:
            label = f"{provider} {shown(endpoint)}" + (f" key {key[:8]}" if key else "")
            fresh = Limiter(label, *configured, now=self.clock())
            if found is not None:  # a reload changed the limits: what was learned stays
                for name in Limiter.STATE:
                    setattr(fresh, name, getattr(found, name))
                fresh.window = min(found.window, float(fresh.ceiling()))
            self.limiters[(provider, endpoint, key)] = found = fresh
        return found

    def grant(self, job: str, provider: str, endpoint: str, key: str, model: str, max_tokens: int,
              input_tokens: int) -> dict[str, Any]:
        """``{"grant": id}``, ``{"wait": seconds, "reason": text}``, or a budget refusal
        ``{"refused": "budget_exceeded", "error": text, ...}`` (the ledger's)."""
        now = self.clock()
        limiter = self.limiter(provider, endpoint, key)
        self._expire(limiter, now)
        answer = limiter.ask(job, f"g{next(self._ids)}", input_tokens, max_tokens, now)
        self._announce(limiter, now)  # a grant may take what remained; a wait may find a reset not yet passed
        if not isinstance(answer, Grant):
            seconds, reason = answer
            wall = self.wall()
            self.waiting[job] = {"endpoint": limiter.label, "reason": reason, "seconds": round(seconds, 3),
                                 "until": round(wall + seconds, 3), "since": self.waiting.get(job, {}).get("since", wall)}
            return {"wait": round(seconds, 3), "reason": f"{limiter.label}: {reason}"}
        self.waiting.pop(job, None)
        if self.ledger is not None:
            refusal = self.ledger.reserve(job, model, provider, max_tokens, input_tokens, grant_id=answer.id)
            if refusal is not None:
                limiter.release(answer.id)
                if getattr(refusal, "wait", False):  # only calls in flight fill the budget: ask again after them
                    return {"wait": BUDGET_WAIT_SECONDS, "reason": f"budget: calls in flight may spend the rest of "
                            f"{getattr(refusal, 'budget', 'a budget')}"}
                return {"refused": "budget_exceeded", **_plain(refusal)}
        self.grants[answer.id] = limiter
        return {"grant": answer.id}

    def done(self, job: str, grant_id: str, outcome: str, seen: dict[str, str], usage: dict[str, Any],
             model: str, retry_after: float | None = None) -> None:
        """The call of ``grant_id`` ended: ``outcome`` (:data:`hermesd.governor.OUTCOMES`),
        the rate-limit headers ``seen`` on its response, its ``usage``; ``retry_after`` seconds when
        the child read one itself (an error event mid-stream carries no header)."""
        limiter = self.grants.pop(grant_id, None)
        if limiter is None:
            return
        now = self.clock()
        learned = headers.read(seen, self.wall())
        if retry_after is not None and learned.retry_after is None:
            learned = headers.Learned(min(headers.MAX_WAIT_SECONDS, max(0.0, retry_after)), learned.dims)
        limiter.done(grant_id, outcome if outcome in OUTCOMES else "error", learned, usage, now)
        self._announce(limiter, now)
        if self.ledger is not None:
            self.ledger.settle(job, grant_id, model, usage)

    def _announce(self, limiter: Limiter, now: float) -> None:
        """Call ``on_pause`` when a pause of ``limiter`` begins: each pause after a refusal (one
        per run of calls refused together, one per probe refused again), and a limit the headers
        said has nothing left when no such pause was announced since the limit was last full."""
        if limiter.began:
            limiter.began = False
            if self.on_pause is not None:
                self.on_pause(limiter, limiter.paused_until - now, limiter.backoff.reason)
            return
        pause = limiter.pause(now)
        if pause is None or limiter.paused_until > now:
            return
        until, over, reason = pause
        if limiter.announced_until <= now and self.on_pause is not None:
            self.on_pause(limiter, until - now, reason)
        limiter.announced_until = max(limiter.announced_until, over)

    def forget(self, job: str) -> None:
        """``job`` ended: its grants are released and it waits no more."""
        self.waiting.pop(job, None)
        for limiter in self.limiters.values():
            limiter.leave(job)
        for grant_id, limiter in list(self.grants.items()):
            grant = limiter.in_flight.get(grant_id)
            if grant is None or grant.job == job:
                limiter.release(grant_id)
                del self.grants[grant_id]

    def _expire(self, limiter: Limiter, now: float) -> None:
        for grant_id, grant in list(limiter.in_flight.items()):
            if now - grant.at > GRANT_TTL_SECONDS:
                limiter.release(grant_id)
                self.grants.pop(grant_id, None)

    def waiting_for(self, job: str) -> dict[str, Any] | None:
        """What ``job`` waits for (``endpoint``, ``reason``, ``seconds`` it was told, ``until`` and
        ``since`` epoch seconds: a display counts down to ``until``), or None."""
        return self.waiting.get(job)

    def annotate(self, record: dict[str, Any]) -> dict[str, Any]:
        """A job ``record`` with ``waiting`` (:meth:`waiting_for`) while the job waits; returns it."""
        waiting = self.waiting.get(record.get("id") or "")
        if waiting is not None:
            record["waiting"] = dict(waiting)
        return record

    def describe(self) -> list[dict[str, Any]]:
        """Every limiter (:meth:`Limiter.describe`) with the jobs waiting for it (``waiting``) and,
        whenever any wait, ``paused_seconds``, ``paused_until`` (epoch seconds) and ``reason``:
        the limiter's pause (a 429 or 529), else the longest wait it told a job (such as the
        headers' "no requests remain until its reset")."""
        now, wall = self.clock(), self.wall()
        out = []
        for limiter in self.limiters.values():
            entry = limiter.describe(now)
            waits = {j: w for j, w in self.waiting.items() if w["endpoint"] == limiter.label}
            entry["waiting"] = sorted(waits)
            if "paused_seconds" in entry:
                entry["paused_until"] = round(wall + entry["paused_seconds"], 3)
            elif waits:
                longest = max(waits.values(), key=lambda w: w["until"])
                entry.update(paused_seconds=round(max(0.0, longest["until"] - wall), 3),
                             paused_until=longest["until"], reason=longest["reason"])
            out.append(entry)
        return out


def shown(endpoint: str) -> str:
    """``endpoint`` as ``ps`` and ``status`` show it: without a ``user:password@`` part."""
    scheme, sep, rest = endpoint.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}" if sep else endpoint


def _plain(refusal: Any) -> dict[str, Any]:
    """A ledger's refusal as plain data (a mapping, or an object with ``to_wire()`` or attributes)."""
    if isinstance(refusal, dict):
        return dict(refusal)
    if hasattr(refusal, "to_wire"):
        return dict(refusal.to_wire())
    return {k: v for k, v in vars(refusal).items() if not k.startswith("_")}
