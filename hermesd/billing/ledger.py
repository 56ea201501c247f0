"""The ledger: what every job's model calls spent, and the budgets that stop spend.

One ledger for every kind of job.  Spend arrives two ways, counted once:

* per model call, :meth:`Ledger.settle` (the grant's report after the call);
* from a child's running totals (``child.progress`` / ``child.result`` ``tokens``),
  :meth:`Ledger.observe`: what they add to what was recorded for the child's run.

Each record is a row of ``spend`` (the state database's migration 7: time, UTC
day, job, its kind, its tree — the top of its parent chain: a delegation's root,
a batch run, a Kanban task —, session, provider, model, tokens and cost; the
cost is NULL when the model has no price), written in its own transaction, and
the job's own totals (``jobs.cache_write``, ``cache_read``, ``cost_usd``,
``cost_unknown``).  ``spend`` rows outlive the jobs (retention removes jobs, not
what they cost): a restart, or a cleanup, forgets nothing that was spent.  A record
the database cannot take now (locked, disk full) is held and written later, in
order and once, and budgets count it meanwhile (:mod:`hermesd.billing.held`).

Budgets (:class:`Budget`): a job's and its ancestors' own (``max_cost_usd``,
``max_tokens`` in the job's spec: a delegation tree, a batch run), the
session's per UTC day and the daemon's per UTC day (``budgets:`` in the config).
:meth:`Ledger.reserve` refuses a model call when what a budget's scope spent plus
what the calls in flight in it may still spend (each at its ``max_tokens`` and
its input estimate, at the model's price) reaches its limit; so calls running in
parallel overshoot a limit by at most one call each.  Tokens count input and
output.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from hermesd import clock
from hermesd.billing.budget import BUDGET_KEYS
from hermesd.billing.held import Entry, HeldSpend
from hermesd.contract.tokens import TOKEN_KEYS
from hermesd.prices import Price, price_of

SUMS = ("COALESCE(SUM(calls), 0) AS calls, " + ", ".join(f"COALESCE(SUM({k}), 0) AS {k}" for k in TOKEN_KEYS)
        + ", COALESCE(SUM(cost_usd), 0) AS cost_usd, "
        "COALESCE(MAX(cost_usd IS NULL AND input + output > 0), 0) AS cost_unknown")
"""The sums of ``spend`` rows a bill shows."""

_grants = itertools.count(1)


@dataclass(frozen=True)
class Budget:
    """One limit over one scope.

    ``name``: what a refusal calls it (``"max_cost_usd of delegation tree deleg_3"``);
    ``scope``: ``("tree", job)`` (the job and all its descendants), ``("session", id,
    day)`` or ``("day", day)``; ``unit``: ``"usd"`` or ``"tokens"``; ``limit`` > 0.
    """

    name: str
    scope: tuple[str, ...]
    unit: str
    limit: float


@dataclass(frozen=True)
class Refusal:
    """Why a model call may not run: ``budget`` (its name), ``spent`` and ``in_flight``
    (in the budget's unit), ``limit``, ``unit``, ``reason`` when it is not the amount (a
    cost limit over a model without a price), ``scope``, and ``wait`` (see below)."""

    budget: str
    spent: float
    in_flight: float
    limit: float
    unit: str
    reason: str | None = None
    scope: tuple[str, ...] = ()
    wait: bool = False
    """Not spent yet, only reserved by calls in flight: the call may go once they report (ask again)."""

    def text(self) -> str:
        """The error a stopped job ends with: the budget, what was spent and the limit."""
        if self.reason:
            return f"budget exceeded: {self.budget}: {self.reason}"
        flight = f" (+{amount(self.in_flight, self.unit)} in flight)" if self.in_flight else ""
        return (f"budget exceeded: {self.budget}: spent {amount(self.spent, self.unit)}{flight} "
                f"of its limit {amount(self.limit, self.unit)}")

    def to_wire(self) -> dict[str, Any]:
        """The refusal as data (an event's, a grant's reply)."""
        return {"budget": self.budget, "spent": self.spent, "in_flight": self.in_flight, "limit": self.limit,
                "unit": self.unit, "reason": self.reason, "scope": list(self.scope), "error": self.text()}


def amount(value: float, unit: str) -> str:
    """``$0.0123`` or ``12,345 tokens``."""
    return f"${value:.4f}" if unit == "usd" else f"{int(value):,} tokens"


@dataclass
class _Reservation:
    job: str
    scopes: frozenset[tuple[str, ...]]
    tokens: int
    cost: float


@dataclass
class _Run:
    """What is recorded of one live child's run: its running totals as reported."""

    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    calls: int = 0
    id: str = field(default_factory=lambda: os.urandom(6).hex())
    """Which run (a new process counting from zero is a new one): part of a record's identity."""


class Ledger:
    """The bill of every job and the budget checks (see the module doc).

    ``store``: the state database; ``jobs``: the job table (``get(id)`` → row);
    ``config``: a callable returning the current :class:`hermesd.config.Config`
    (prices and budgets follow a reload); ``on_refusal(job, refusal)``: called when
    :meth:`reserve` refuses.  Runs on the event loop; each record is one small transaction.
    """

    def __init__(self, store: Any, jobs: Any, config: Callable[[], Any],
                 on_refusal: Callable[[str, Refusal], None] | None = None):
        self.store, self.jobs, self.config, self.on_refusal = store, jobs, config, on_refusal
        self.asked: set[str] = set()  # live jobs whose calls ask before they start (the governor's grant)
        self._runs: dict[str, _Run] = {}
        self._inflight: dict[tuple[str, str], _Reservation] = {}
        self._prices: tuple[Any, dict[str, Price]] = (None, {})
        self.pending = HeldSpend(self._write)

    # prices ---------------------------------------------------------------------

    def price(self, model: str | None, provider: str | None = None) -> Price | None:
        """The price of ``model`` (of ``provider``) under the current config, or None (unknown)."""
        config = self.config()
        if self._prices[0] is not config:
            self._prices = (config, config.price_table())
        return price_of(model, self._prices[1], provider)

    # recording ------------------------------------------------------------------

    def observe(self, job_id: str, tokens: Any, *, provider: str | None = None, model: str | None = None,
                api_calls: Any = None) -> bool:
        """A child's running totals (``tokens`` as ``contract.tokens.TOKEN_KEYS``, ``api_calls``):
        record what they add to what is recorded of its run.  A total lower than the
        recorded one means a new run of the job (a new process): counted from zero.
        Returns True when something was recorded."""
        if not isinstance(tokens, dict):
            return False
        now = {k: max(0, _int(tokens.get(k))) for k in TOKEN_KEYS}
        calls = max(0, _int(api_calls))
        run = self._run(job_id)
        if any(now[k] < run.tokens[k] for k in TOKEN_KEYS) or calls < run.calls:
            run.tokens, run.calls, run.id = dict.fromkeys(TOKEN_KEYS, 0), 0, _Run().id
        delta = {k: now[k] - run.tokens[k] for k in TOKEN_KEYS}
        added = max(0, calls - run.calls)
        run.tokens, run.calls = now, max(calls, run.calls)
        if not any(delta.values()):
            return False
        self.record(job_id, delta, provider=provider, model=model, calls=added)
        return True

    def record(self, job_id: str, tokens: dict[str, int], *, provider: str | None, model: str | None,
               calls: int = 1) -> None:
        """Write one ``spend`` row for ``job_id`` and add it to the job's totals (one transaction);
        held and written later when the database cannot take it now (:mod:`hermesd.billing.held`)."""
        row = self.jobs.get(job_id) or {"id": job_id}
        model, provider = model or row.get("model"), provider or row.get("provider")
        price = self.price(model, provider)
        cost = price.cost(tokens) if price is not None else None
        tree, tree_kind = self.tree_of(row)
        now = clock.now_iso()
        run = self._runs.get(job_id) or _Run()
        self.pending.put(Entry(
            (job_id, run.id, run.calls, *(run.tokens[k] for k in TOKEN_KEYS)),
            {"time": now, "day": now[:10], "job": job_id, "kind": row.get("kind"), "tree": tree,
             "tree_kind": tree_kind, "session": row.get("session"), "provider": provider, "model": model,
             "calls": calls, **{k: int(tokens.get(k) or 0) for k in TOKEN_KEYS}, "cost_usd": cost},
            tuple(self.chain_of(row))))

    def _write(self, entry: Entry) -> None:
        """:class:`HeldSpend`'s ``write``: the record's ``spend`` row and the job's totals, one transaction."""
        spend = entry.row
        with self.store.transaction():
            self.store.insert("spend", spend)
            self.store.db.execute(
                "UPDATE jobs SET cache_write = cache_write + ?, cache_read = cache_read + ?, "
                "cost_usd = cost_usd + ?, cost_unknown = MAX(cost_unknown, ?) WHERE id = ?",
                (spend["cache_write"], spend["cache_read"], spend["cost_usd"] or 0.0,
                 int(spend["cost_usd"] is None and bool(spend["input"] or spend["output"])), spend["job"]))

    def _run(self, job_id: str) -> _Run:
        """What is recorded of the live child's run of ``job_id``; a child that resumes the job
        from its journal (``hermesd.resume``) starts from the totals its earlier children reached,
        recorded already (the job's spec ``carried``): only what it adds is counted."""
        run = self._runs.get(job_id)
        if run is None:
            row = self.jobs.get(job_id) or {}
            carried = ((row.get("spec") or {}).get("carried") or {}) if row.get("resumes") else {}
            run = self._runs[job_id] = _Run(calls=max(0, _int(carried.get("api_calls"))))
            run.tokens.update({k: max(0, _int((carried.get("tokens") or {}).get(k))) for k in TOKEN_KEYS})
        return run

    def forget(self, job_id: str) -> None:
        """The job's process is gone: drop its run's totals and its calls in flight."""
        self._runs.pop(job_id, None)
        self.asked.discard(job_id)
        for key in [k for k in self._inflight if k[0] == job_id]:
            del self._inflight[key]

    def tree_of(self, row: dict[str, Any]) -> tuple[str, str | None]:
        """The top of ``row``'s parent chain and its kind: ``(job id, kind)``, or a parent that
        is no job (a Kanban task ``kb_N``: kind ``kanban_task``)."""
        rows, outside = self._chain(row)
        if outside is not None:
            return outside, "kanban_task" if outside.startswith("kb_") else None
        return rows[-1]["id"], rows[-1].get("kind")

    def chain_of(self, row: dict[str, Any]) -> list[str]:
        """The ids of ``row``'s parent chain, ``row``'s first, the top (:meth:`tree_of`) last."""
        rows, outside = self._chain(row)
        return [r["id"] for r in rows] + ([outside] if outside is not None else [])

    def _chain(self, row: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        """The rows of ``row``'s parent chain, ``row``'s first, and the parent that is no job, if any."""
        rows = [row]
        while row.get("parent"):
            parent = self.jobs.get(row["parent"])
            if parent is None:
                return rows, str(row["parent"])
            if any(parent["id"] == r["id"] for r in rows):
                break
            rows.append(parent)
            row = parent
        return rows, None

    # budgets --------------------------------------------------------------------

    def budgets_of(self, row: dict[str, Any]) -> list[Budget]:
        """Every budget a model call of job ``row`` counts against."""
        out: list[Budget] = []
        seen: set[str] = set()
        node: dict[str, Any] | None = row
        while node is not None and node["id"] not in seen:
            seen.add(node["id"])
            budget = (node.get("spec") or {}).get("budget") or {}
            kind = self.jobs.kind(node["kind"])
            what = f"{kind.name} run" if kind.budget == "run" else "delegation tree of"
            for key, unit in zip(BUDGET_KEYS, ("usd", "tokens")):
                if budget.get(key):
                    out.append(Budget(f"{key} of {what} {node['id']}", ("tree", node["id"]), unit,
                                      float(budget[key])))
            node = self.jobs.get(node["parent"]) if node.get("parent") else None
        limits, day = self.config().budgets, clock.now_iso()[:10]
        if row.get("session"):
            for value, unit, key in ((limits.session_daily_cost_usd, "usd", "session_daily_cost_usd"),
                                     (limits.session_daily_tokens, "tokens", "session_daily_tokens")):
                if value:
                    out.append(Budget(f"budgets.{key} of session {row['session']} on {day}",
                                      ("session", row["session"], day), unit, float(value)))
        for value, unit, key in ((limits.daily_cost_usd, "usd", "daily_cost_usd"),
                                 (limits.daily_tokens, "tokens", "daily_tokens")):
            if value:
                out.append(Budget(f"budgets.{key} on {day}", ("day", day), unit, float(value)))
        return out

    def spent(self, scope: tuple[str, ...]) -> dict[str, Any]:
        """What ``scope`` (a :attr:`Budget.scope`) spent: ``{calls, input, output, cache_write,
        cache_read, tokens, cost_usd, cost_unknown}`` (``tokens``: input and output;
        ``cost_unknown``: some of it had no price)."""
        kind = scope[0]
        if kind == "day":
            where, params = "WHERE day = ?", (scope[1],)
        elif kind == "session":
            where, params = "WHERE session = ? AND day = ?", (scope[1], scope[2])
        elif (self.jobs.get(scope[1]) or {}).get("parent"):
            where, params = "WHERE job IN (SELECT id FROM sub)", (scope[1],)
        else:
            where, params = "WHERE tree = ?", (scope[1],)
        sub = ("WITH RECURSIVE sub(id) AS (SELECT ? UNION SELECT j.id FROM jobs j JOIN sub ON j.parent = sub.id) "
               if "sub" in where else "")
        row = self.store.one(f"{sub}SELECT {SUMS} FROM spend {where}", params)
        for held in self.pending.within(scope):  # held: not written yet, counted all the same
            unknown = held["cost_usd"] is None and held["input"] + held["output"] > 0
            row = {"calls": row["calls"] + held["calls"], **{k: row[k] + held[k] for k in TOKEN_KEYS},
                   "cost_usd": row["cost_usd"] + (held["cost_usd"] or 0.0), "cost_unknown": row["cost_unknown"] or unknown}
        return {**row, "tokens": row["input"] + row["output"], "cost_usd": round(float(row["cost_usd"]), 6),
                "cost_unknown": bool(row["cost_unknown"])}

    def used(self, budget: Budget) -> float:
        """What ``budget``'s scope spent, in its unit."""
        spent = self.spent(budget.scope)
        return spent["cost_usd"] if budget.unit == "usd" else spent["tokens"]

    def check(self, job_id: str, *, model: str | None = None, tokens: int = 0, cost: float | None = 0.0,
              budgets: Iterable[Budget] | None = None) -> Refusal | None:
        """The first budget of ``job_id`` that a call of ``tokens`` (at most) costing ``cost``
        (None: no price) may not start under: spent plus in flight reaches the limit.
        ``budgets``: those to check (default: all of the job's)."""
        row = self.jobs.get(job_id)
        if row is None:
            return None
        for budget in self.budgets_of(row) if budgets is None else budgets:
            if budget.unit == "usd" and cost is None:
                return Refusal(budget.name, 0.0, 0.0, budget.limit, budget.unit,
                               f"the price of model {model or '(unknown)'} is unknown, so its cost cannot be "
                               "kept within the limit (give it a price under prices: in the config)", budget.scope)
            used = self.used(budget)
            flight = sum((r.cost if budget.unit == "usd" else r.tokens) for r in self._inflight.values()
                         if budget.scope in r.scopes)
            if used + flight >= budget.limit:
                return Refusal(budget.name, used, flight, budget.limit, budget.unit, scope=budget.scope,
                               wait=used < budget.limit)
        return None

    def reserve(self, job_id: str, model: str | None, provider: str | None, max_tokens: int,
                input_estimate: int, *, grant_id: str | None = None) -> Refusal | None:
        """Before a model call of ``job_id``: a :class:`Refusal` when a budget of the job does
        not allow it (see the module doc) — with ``wait`` when only the calls in flight fill
        it (ask again once they reported) —, else None and the call is in flight (at most
        ``input_estimate`` prompt and ``max_tokens`` output tokens, at ``model``'s price)
        until :meth:`settle` with the same ``grant_id`` (or the job's oldest)."""
        row = self.jobs.get(job_id)
        if row is None:
            return None
        price = self.price(model or row.get("model"), provider or row.get("provider"))
        tokens = max(0, int(input_estimate)) + max(0, int(max_tokens))
        cost = price.cost({"input": input_estimate, "output": max_tokens}) if price is not None else None
        budgets = self.budgets_of(row)
        self.asked.add(job_id)
        refusal = self.check(job_id, model=model, tokens=tokens, cost=cost, budgets=budgets)
        if refusal is None:
            key = (job_id, grant_id or f"g{next(_grants)}")
            self._inflight[key] = _Reservation(job_id, frozenset(b.scope for b in budgets), tokens, cost or 0.0)
        elif self.on_refusal is not None and not refusal.wait:
            self.on_refusal(job_id, refusal)
        return refusal

    def settle(self, job_id: str, grant_id: str | None, model: str | None, usage: Any, *,
               provider: str | None = None) -> None:
        """After a model call of ``job_id``: its reservation ends and ``usage`` (tokens as
        ``contract.tokens.TOKEN_KEYS``) is recorded — and counted as part of the child's next
        running totals, so :meth:`observe` does not count it again.  A call without tokens (it
        failed: the child's totals do not count it either) is no call of the run: counted, it made
        the child's next totals look like those of a new run, and everything was billed again."""
        key = (job_id, grant_id) if (job_id, grant_id) in self._inflight else next(
            (k for k in self._inflight if k[0] == job_id), None)
        if key is not None:
            del self._inflight[key]
        if not isinstance(usage, dict):
            return
        tokens = {k: max(0, _int(usage.get(k))) for k in TOKEN_KEYS}
        if not any(tokens.values()):
            return  # a call that failed: nothing to bill, and the child's totals count replies only
        run = self._run(job_id)
        run.tokens = {k: run.tokens[k] + tokens[k] for k in TOKEN_KEYS}
        run.calls += 1
        self.record(job_id, tokens, provider=provider, model=model, calls=1)

    def exhausted(self, job_id: str) -> Refusal | None:
        """The first budget of ``job_id`` whose scope has spent its limit already (after a report)."""
        row = self.jobs.get(job_id)
        if row is None:
            return None
        for budget in self.budgets_of(row):
            used = self.used(budget)
            if used >= budget.limit:
                return Refusal(budget.name, used, 0.0, budget.limit, budget.unit, scope=budget.scope)
        return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


REPORT_BY = {"job": "job", "tree": "tree", "session": "session", "batch": "tree", "task": "tree", "model": "model",
             "day": "day"}
"""``hermesctl usage --by``: the ``spend`` column each grouping is by (``batch``: trees that are
batch runs; ``task``: trees that are Kanban tasks; ``tree``: every tree, a delegation's root)."""

_REPORT_WHERE = {"session": "session IS NOT NULL", "batch": "tree_kind = 'batch'", "task": "tree_kind = 'kanban_task'"}


def report(store: Any, *, by: str = "day", since: str | None = None) -> dict[str, Any]:
    """The bill grouped ``by`` (:data:`REPORT_BY`) from ``since`` (ISO 8601 UTC, inclusive):
    ``{by, since, rows: [{key, kind?, calls, input, output, cache_write, cache_read, cost_usd,
    cost_unknown}], total: {...}}``, rows in key order.  ``cost_usd`` counts what had a price;
    ``cost_unknown`` is true when some tokens had none."""
    column = REPORT_BY[by]
    where, params = [], []
    if since:
        where.append("time >= ?")
        params.append(since)
    if by in _REPORT_WHERE:
        where.append(_REPORT_WHERE[by])
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    kind = ", MAX(kind) AS kind" if by == "job" else ", MAX(tree_kind) AS kind" if column == "tree" else ""
    rows = store.all(f"SELECT {column} AS key{kind}, {SUMS} FROM spend{clause} GROUP BY {column} ORDER BY {column}",
                     params)
    total = store.one(f"SELECT {SUMS} FROM spend{clause}", params)
    for row in [*rows, total]:
        row["cost_unknown"] = bool(row["cost_unknown"])
        row["cost_usd"] = round(float(row["cost_usd"]), 6)
    return {"by": by, "since": since, "rows": rows, "total": total}
