"""The bill's plugin (no job kind: it sees every job) and the ``usage`` op.

The plugin makes the :class:`hermesd.billing.ledger.Ledger` at its first use (:attr:`BillingPlugin.ledger`:
the first report of a model call or of tokens, a grant, a batch run; ``Plugin.on_demand``) and
gives it to the governor: each model call of a metered provider asks the ledger
first (``child.grant``: :meth:`Ledger.reserve`; a refusal ends the job ``failed``
with ``budget_exceeded``, the error naming the budget, what was spent and the limit)
and reports its usage (``child.grant_done``: :meth:`Ledger.settle`).  The child ops
``child.progress`` and ``child.result`` hand it each child's running totals
(:func:`observe`); a job whose calls do not ask first (a provider without grants)
and whose report shows one of its budgets spent is stopped, ending the same way —
but an item of a batch run over its run's budget is left to finish: the run stops
dispatching instead (:mod:`batch.job`).  Each budget is announced once with a
``budget.exceeded`` event.  Usage the database cannot take now is held, written later
and waited for by a graceful stop (:mod:`hermesd.billing.held`).
"""

from __future__ import annotations

import datetime
from typing import Any

from hermesd import clock
from typing import TYPE_CHECKING

from hermesd.billing.budget import nothing_spent
from hermesd.context import Context
from hermesd.plugin import Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op

if TYPE_CHECKING:
    from hermesd.billing.ledger import Ledger, Refusal

class BillingPlugin(Plugin):
    """The ledger's owner (see the module doc); no job kind."""

    events = {
        "budget.exceeded": "A budget refused a job's model call, or a job's report showed one of its budgets "
        "spent (once per budget; the job ends `failed` with `budget_exceeded`, unless it is a batch item: its run "
        "stops dispatching). `data`: `budget` (its name), `spent`, `in_flight`, `limit`, `unit` (`usd` or "
        "`tokens`), `reason`, `scope`, `error`.",
    }

    on_demand = ("hermesd.billing.ledger", "hermesd.billing.held")

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._ledger: "Ledger | None" = None  # made at the first need (:attr:`ledger`)
        self.announced: set[str] = set()
        ctx.provide(self)

    @property
    def ledger(self) -> "Ledger":
        """The ledger (:mod:`hermesd.billing.ledger`), made at its first use: a child's report with
        tokens or model calls, a governor's grant (the governor asks the ledger before each call), a
        batch run, a ``usage`` op; a daemon that never had one imports none of it."""
        if self._ledger is None:
            from hermesd.billing.ledger import Ledger

            ctx = self.ctx
            self._ledger = ctx.provide(Ledger(ctx.store, ctx.jobs, lambda: ctx.config, on_refusal=self.announce))
        return self._ledger

    def spent(self, scope: tuple[str, ...]) -> dict[str, Any]:
        """What ``scope`` spent (``Ledger.spent``); while no ledger was made and the ``spend`` table is
        empty, nothing (:func:`hermesd.billing.budget.nothing_spent`), without importing the ledger."""
        if self._ledger is None and self.ctx.store.db.execute("SELECT 1 FROM spend LIMIT 1").fetchone() is None:
            return nothing_spent()
        return self.ledger.spent(scope)

    def status(self) -> dict[str, Any]:
        """``spend``: what was spent today (UTC; ``Ledger.spent``) and the daily limits of ``budgets:``."""
        limits = self.ctx.config.budgets
        return {"spend": {"today": self.spent(("day", clock.now_iso()[:10])),
                          "daily_cost_usd": limits.daily_cost_usd, "daily_tokens": limits.daily_tokens}}

    def announce(self, job_id: str, refusal: "Refusal") -> None:
        """A ``budget.exceeded`` event, once per budget."""
        if refusal.budget not in self.announced:
            self.announced.add(refusal.budget)
            self.ctx.events.emit("budget.exceeded", job=job_id, data=refusal.to_wire())

    def settling(self) -> float:
        """Shutdown: the usage still held (:mod:`hermesd.billing.held`) is waited for a while."""
        return 0.0 if self._ledger is None else self._ledger.pending.settling()

    def shutdown(self) -> None:
        """Shutdown: a last attempt at the held usage; what still cannot be written is logged as lost."""
        if self._ledger is not None:  # no ledger: nothing held
            self._ledger.pending.close()

    def after_exit(self, row: dict[str, Any] | None) -> None:
        """A job ended and its process is gone: the ledger forgets its run (what it spent stays)."""
        if row is not None and self._ledger is not None:  # no ledger: it has no run to forget
            self._ledger.forget(row["id"])

    def exceeded(self, job_id: str, refusal: "Refusal") -> None:
        """``job_id``'s report shows ``refusal``'s budget spent: stop the job (unless it is a batch
        item under its run's budget) and announce the budget once."""
        self.announce(job_id, refusal)
        scope_row = self.ctx.jobs.get(refusal.scope[1]) if refusal.scope[:1] == ("tree",) else None
        if scope_row is not None and self.ctx.jobs.kind(scope_row["kind"]).budget == "run":
            return  # the run stops dispatching; what runs finishes (hermesd.jobs.JobKind.budget)
        try:
            self.ctx.runner.stop(job_id, "budget_exceeded", error=refusal.text())
        except ProtocolError:
            pass  # it ended meanwhile


def observe(ctx: Context, job: str, args: dict[str, Any], *, final: bool = False) -> None:
    """Hand a child report's running totals to the ledger (``child.progress``; ``child.result``
    with ``final``), and stop the job when they show a budget of it spent (not after its
    final report: it has ended).  A report of no tokens and no call, before any ledger was made,
    has nothing to record: the ledger is not made for it."""
    plugin, tokens = ctx.service(BillingPlugin), args.get("tokens")
    if plugin._ledger is None and not (isinstance(tokens, dict) and (any(tokens.values()) or args.get("api_calls"))):
        return
    ledger = plugin.ledger
    doing = ctx.runner.doing(job)
    if ledger.observe(job, tokens, provider=args.get("provider") or doing.provider,
                      model=args.get("model") or doing.model, api_calls=args.get("api_calls")) and not final \
            and job not in ledger.asked:  # a job whose calls ask first is refused its next call instead
        refusal = ledger.exhausted(job)
        if refusal is not None:
            plugin.exceeded(job, refusal)


def since_of(args: dict[str, Any]) -> str | None:
    """The ``since`` argument (an ISO 8601 date or time; a naive one is UTC) as UTC ISO 8601
    text comparable with the ledger's times.  Raises ``ProtocolError(bad_request)``."""
    text = arg(args, "since", str, None)
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ProtocolError("bad_request", f"argument 'since' must be an ISO 8601 date or time such as "
                            f"2026-12-01 or 2026-12-01T09:00:00Z, not {text!r}", {"field": "since"}) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


@op("usage")
async def usage(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The bill: tokens and cost of every model call, grouped ``by`` ``job``, ``tree`` (a
    delegation's root and everything below it), ``session``, ``batch`` (runs), ``task``
    (Kanban tasks), ``model`` or ``day`` (UTC; the default), from ``since`` (ISO 8601; a
    date is its midnight UTC).  Returns ``{by, since, rows: [{key, kind?, calls, input,
    output, cache_write, cache_read, cost_usd, cost_unknown}], total}``: ``input`` counts
    every prompt token, the cache's writes and reads among them; ``cost_usd`` what had a
    price; ``cost_unknown`` true when some tokens' model had none.  Usage held while the
    database could not take it is written first, if it can be now (:mod:`hermesd.billing.held`)."""
    from hermesd.billing.ledger import REPORT_BY, report  # here: a daemon never asked for its bill does without

    ledger = ctx.service(BillingPlugin)._ledger
    if ledger is not None:  # no ledger: nothing held
        ledger.pending.flush()
    return report(ctx.store, by=arg(args, "by", str, "day", choices=tuple(REPORT_BY)), since=since_of(args))


def ledger_of(ctx: Context) -> "Ledger":
    """The daemon's ledger (:attr:`BillingPlugin.ledger`: made at its first use)."""
    return ctx.service(BillingPlugin).ledger
