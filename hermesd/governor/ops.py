"""The governor's child ops and its plugin (no job kind: it sees every job end).

``child.grant`` and ``child.grant_done`` are answered at once from :class:`hermesd.governor.service.Governor`;
the plugin makes the governor at the first ``child.grant`` (:attr:`GovernorPlugin.governor`;
``Plugin.on_demand``: a daemon whose children never asked holds none of it), gives it the config's
``rate_limits`` and the bill's ledger,
releases the grants of a job that ended, and publishes ``governor.paused`` when an endpoint is
paused for the fleet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermesd.billing.ops import BillingPlugin
from hermesd.context import Context
from hermesd.governor import OUTCOMES
from hermesd.plugin import Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op

if TYPE_CHECKING:
    from hermesd.governor.limiter import Limiter
    from hermesd.governor.service import Governor


MAX_TOKENS = 1 << 31
"""The most tokens a call may say it takes (input estimate or ``max_tokens``)."""


class GovernorPlugin(Plugin):
    """The fleet's governor (see the module doc); no job kind."""

    events = {
        "governor.paused": "A provider endpoint is paused for every child: a 429/529 (or an overload mid-stream) — "
        "once per pause: one for the calls refused together, one per probe refused again — or its rate-limit headers "
        "said nothing remains (once until that limit is full again). `data`: `endpoint` (provider, URL, key hash), "
        "`seconds`, `reason` (group-committed).",
    }

    on_demand = ("hermesd.governor.service", "hermesd.governor.limiter", "hermesd.governor.headers",
                 "hermesd.governor.learned", "hermesd.governor.backoff")

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._governor: "Governor | None" = None  # made at the first grant (:attr:`governor`)
        ctx.provide(self)

    @property
    def governor(self) -> "Governor":
        """The governor (:mod:`hermesd.governor.service`), made at the first ``child.grant``, its calls
        asking the bill's ledger first when the bill is kept (:class:`hermesd.billing.ops.BillingPlugin`)."""
        if self._governor is None:
            from hermesd.governor.service import Governor

            self._governor = self.ctx.provide(Governor(self.limits, on_pause=self.paused))
            if BillingPlugin in self.ctx.services:
                self._governor.ledger = self.ctx.service(BillingPlugin).ledger
        return self._governor

    def annotate(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with ``waiting`` while its job waits (``Governor.annotate``; none before a grant)."""
        return record if self._governor is None else self._governor.annotate(record)

    def describe(self) -> list[dict[str, Any]]:
        """Every limiter (``Governor.describe``): none before the first grant."""
        return [] if self._governor is None else self._governor.describe()

    def limits(self, provider: str, endpoint: str) -> tuple[Any, Any, Any, Any]:
        """The configured limits of ``endpoint`` (``rate_limits.<url>``, else ``rate_limits.<provider>``)."""
        table = self.ctx.config.rate_limits
        entry = table.get(endpoint.rstrip("/")) or table.get(provider)
        if entry is None:
            return None, None, None, None
        return (entry.requests_per_minute, entry.input_tokens_per_minute, entry.output_tokens_per_minute,
                entry.max_concurrent)

    def paused(self, limiter: "Limiter", seconds: float, reason: str) -> None:
        """Publish ``governor.paused`` once per pause (not durable: it is news, not state)."""
        self.ctx.events.emit("governor.paused", data={"endpoint": limiter.label, "seconds": round(seconds, 3),
                                                      "reason": reason}, durable=False)

    def after_exit(self, row: dict[str, Any] | None) -> None:
        """A job ended: its grants are released (:meth:`Governor.forget`)."""
        if row is not None and self._governor is not None:  # no governor: no grant to release
            self._governor.forget(row["id"])


def _text(args: dict[str, Any], name: str, most: int = 2048) -> str:
    value = arg(args, name, str)
    if not value or len(value) > most:
        raise ProtocolError("bad_request", f"argument '{name}' must be a non-empty string of at most {most} "
                            "characters", {"field": name})
    return value


@op("child.grant", child=True)
async def child_grant(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """May the child make one model call now?  Asked before each call of a provider with limits.

    Args: ``provider`` (``anthropic``, ``openai-compat``), ``endpoint`` (its base URL),
    ``key`` (the first hex digits of the SHA-256 of the API key; ``""`` without one — the key
    itself never crosses), ``model``, ``max_tokens``, ``input_tokens`` (the child's estimate).
    Answers at once: ``{grant: id}`` (go; report with ``child.grant_done``), ``{wait: seconds,
    reason}`` (ask again after that long: the waiting is the child's), or ``{refused:
    "budget_exceeded", error, …}`` (a budget of the bill said no: the job ends ``failed``).
    Asking counts as the child's activity (a waiting child is not stale)."""
    ctx.runner.activity.seen(job)
    return ctx.service(GovernorPlugin).governor.grant(
        job, _text(args, "provider", 64), _text(args, "endpoint"), arg(args, "key", str, "")[:64],
        _text(args, "model", 256), arg(args, "max_tokens", int, lo=0, hi=MAX_TOKENS),
        arg(args, "input_tokens", int, 0, lo=0, hi=MAX_TOKENS))


@op("child.grant_done", child=True)
async def child_grant_done(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """The call of a grant ended.  Args: ``grant`` (its id), ``outcome`` (``ok``, ``rate_limited``
    (429), ``overloaded`` (529/503 or an overload mid-stream), ``quota`` (the money ran out), ``error``),
    ``model``, optional ``retry_after`` (seconds the child read), ``headers`` (the response's
    ``retry-after*``, ``anthropic-ratelimit-*`` and ``x-ratelimit-*`` headers) and ``usage``
    (``input``, ``output``, ``cache_write``, ``cache_read`` tokens).  What a 429/529 or the
    headers say pauses the endpoint for every child.  Returns ``{}``; an unknown grant is ignored."""
    seen = arg(args, "headers", dict, {})
    usage = arg(args, "usage", dict, {})
    plugin = ctx.service(GovernorPlugin)
    if plugin._governor is None:
        return {}  # no grant was given: an unknown grant
    plugin._governor.done(
        job, _text(args, "grant", 64), arg(args, "outcome", str, choices=OUTCOMES),
        {str(k): str(v) for k, v in seen.items()}, {str(k): v for k, v in usage.items() if isinstance(v, int)},
        arg(args, "model", str, ""), arg(args, "retry_after", (int, float), None, lo=0, hi=86400))
    return {}
