"""The child's side of the governor: ask before each model call, wait here when told, report after.

A metered provider (the trait ``metered`` in :data:`hermesd.contract.providers.PROVIDER_TABLE`:
``anthropic``, ``openai-compat``) calls no model
without a grant: :meth:`Grants.acquire` sends ``child.grant`` (one short request; the daemon
answers at once; the provider's SDK is imported and its client built before the first, so that
a granted call is sent at once: the grant took its part of the provider's bucket) and, when told "wait N seconds, because R", waits in this process — the stop
flag honoured, the wait reported as the activity "waiting for the provider's rate limit: R"
so the child is never taken for stale, and logged once per wait (the reason names the key only by
its hash).  :meth:`Grants.done` reports the outcome with the
response's limit headers and usage (``child.grant_done``, no reply awaited), so that one
child's 429 pauses the endpoint for all.  The local and scripted providers ask nothing.

Where there is no daemon to ask (an item on a Ray cluster without its driver's relay: its
channel refuses the grant; with the relay, its grants go to the daemon through the driver),
the child paces itself: after a 429/529 it waits what ``retry-after`` said, else backs off
(1, 2, 4 … 60 s), and tries again while its deadline allows.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from hermesd.contract import tokens
from hermesd.contract.providers import PROVIDER_WAIT as WAITING, provider_entry
from hermesd.protocol import ProtocolError

LIMIT_HEADERS = ("retry-after", "retry-after-ms", "anthropic-ratelimit-", "x-ratelimit-")
"""Response headers (names or prefixes) a child reports to the daemon: nothing else of a response leaves it."""

SLICE_SECONDS = 1.0
"""A wait is slept in slices this long, each one activity (the stop flag is seen at once anyway)."""

REASK_SECONDS = 30.0
"""The longest wait before asking again (the daemon may know more by then)."""

PACED = ("rate_limited", "overloaded")
"""Outcomes after which the call is made again when the governor (or the pacing) allows."""


class BudgetExceeded(Exception):
    """The bill refused the call: ``refusal`` is the daemon's answer (``error``, ``budget``, ``spent``, ``limit``)."""

    def __init__(self, refusal: dict[str, Any]):
        super().__init__(str(refusal.get("error") or "a budget is exhausted"))
        self.refusal = refusal


def limit_headers(headers: Any) -> dict[str, str]:
    """The headers of a response (any mapping) that speak of limits (:data:`LIMIT_HEADERS`), names in lower case."""
    try:
        items = list(headers.items())
    except AttributeError:
        return {}
    return {str(k).lower(): str(v) for k, v in items if str(k).lower().startswith(LIMIT_HEADERS)}


def retry_after_of(headers: dict[str, str]) -> float | None:
    """Seconds of ``retry-after-ms``, else of a numeric ``retry-after`` (None without either): the
    child's own pacing when no governor answers (the daemon reads the headers itself)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) * scale)
        except (KeyError, ValueError):
            continue
    return None


def estimate_tokens(system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """A call's input tokens, estimated before it is made (:func:`hermesd.contract.tokens.estimate_tokens`)."""
    return max(1, tokens.estimate_tokens([system, messages, tools]))


class Grants:
    """The grants of one run.  ``channel``: the job's channel (None: no daemon); ``provider``:
    the run's provider; ``stop``: the stop flag; ``activity``: :class:`child.activity.Activity`;
    ``log``: writes a line of the job's log."""

    def __init__(self, channel: Any, provider: Any, stop: Any, activity: Any, log: Callable[[str], None]):
        self.channel, self.provider, self.stop, self.activity, self.log = channel, provider, stop, activity, log
        entry = provider_entry(getattr(provider, "name", None))
        self.metered = entry is not None and entry.metered
        self.asking = self.metered and callable(getattr(channel, "call", None))
        self.strikes = 0
        self.connected = False

    def acquire(self, max_tokens: int, input_tokens: int) -> str | None:
        """A grant id (``""`` when nothing is asked), or None once the stop flag is set while waiting.
        Raises :class:`BudgetExceeded` when a budget says no."""
        if not self.asking:
            return "" if not self.stop.is_set() else None
        provider = self.provider
        if not self.connected:  # a grant takes its part of the provider's bucket: be ready to send it
            self.connected = True
            try:
                getattr(provider, "connect", lambda: None)()
            except Exception:  # noqa: BLE001 - the call meets it again and reports it as the provider's error
                pass
        waited_since = None
        while not self.stop.is_set():
            try:
                answer = self.channel.call("child.grant", timeout=30.0, provider=provider.name,
                                           endpoint=provider.endpoint, key=provider.key_id, model=provider.model,
                                           max_tokens=int(max_tokens), input_tokens=int(input_tokens))
            except ProtocolError as exc:  # no governor to ask (a Ray item's channel): pace ourselves
                self.log(f"no grants from hermesd ({exc}); pacing this child's calls itself")
                self.asking = False
                return ""
            if answer.get("grant"):
                if waited_since is not None:
                    self.log(f"{WAITING}: over after {time.monotonic() - waited_since:.1f}s")
                return str(answer["grant"])
            if answer.get("refused"):
                raise BudgetExceeded(answer)
            seconds, reason = float(answer.get("wait") or SLICE_SECONDS), str(answer.get("reason") or "told to wait")
            if waited_since is None:  # one line per wait, not per asking again
                waited_since = time.monotonic()
                self.log(f"{WAITING}: {reason} (told {seconds:.1f}s)")
            self.wait(seconds, reason)
        return None

    def wait(self, seconds: float, reason: str) -> None:
        """Wait ``seconds`` (at most :data:`REASK_SECONDS`) as the activity :data:`WAITING`, in slices,
        until stopped; a new reason is reported at once, the same one again throttled (a child at the
        concurrency window asks every fraction of a second)."""
        what = f"{WAITING}: {reason}"
        if what != self.activity.what:
            self.activity.begin(what)
        else:
            self.activity.touch(what)
            self.activity.tick()
        end = time.monotonic() + min(max(0.0, seconds), REASK_SECONDS)
        while not self.stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            self.stop.event.wait(min(left, SLICE_SECONDS))
            self.activity.touch()
            self.activity.tick()

    def done(self, grant: str | None, outcome: str, *, headers: dict[str, str] | None = None,
             usage: dict[str, Any] | None = None, retry_after: float | None = None) -> None:
        """Report the call of ``grant``; without a governor, a refused call is paced here
        (:meth:`pace`).  Never raises."""
        if grant and self.asking:
            try:
                self.channel.notify("child.grant_done", grant=grant, outcome=outcome, model=self.provider.model,
                                    headers=dict(headers or {}), retry_after=retry_after,
                                    usage={k: int(v) for k, v in (usage or {}).items() if isinstance(v, (int, float))})
            except Exception as exc:  # noqa: BLE001 - the report is the daemon's loss, not the run's
                print(f"hermes-child: could not report a model call to hermesd: {exc}", file=sys.stderr, flush=True)
        if outcome == "ok":
            self.strikes = 0
        elif outcome in PACED and not self.asking:
            self.pace(retry_after)

    def pace(self, retry_after: float | None) -> None:
        """Wait after a refusal without a governor: ``retry_after``, else 1, 2, 4 … 60 s."""
        seconds = retry_after if retry_after is not None else min(60.0, 2.0 ** self.strikes)
        self.strikes += 1
        self.wait(seconds, f"the provider refused the call; trying again in {seconds:g}s")
