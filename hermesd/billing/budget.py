"""A job's budget as a request gives it, and what nothing spent looks like: what the daemon needs
of the bill before its first model call (the ledger, :mod:`hermesd.billing.ledger`, is imported at
its first use: ``BillingPlugin.on_demand``)."""

from __future__ import annotations

from typing import Any

from hermesd.contract.tokens import TOKEN_KEYS
from hermesd.protocol import ProtocolError, arg

BUDGET_KEYS = ("max_cost_usd", "max_tokens")
"""A job's own budget, in its spec's ``budget`` map: USD, tokens (input and output) of its whole subtree."""

MAX_COST_USD = 1e9
MAX_TOKENS = 1 << 53


def budget_of(args: dict[str, Any], names: tuple[str, str] = BUDGET_KEYS) -> dict[str, Any] | None:
    """A request's cost limit (USD) and token limit (input and output tokens), the arguments
    ``names`` (default ``max_cost_usd``, ``max_tokens``), as a job's ``budget`` map (keys
    :data:`BUDGET_KEYS`; None when neither is given).  Raises ``ProtocolError(bad_request)``
    naming the argument when a limit is not a number > 0."""
    budget = {}
    for key, name, types, most in zip(BUDGET_KEYS, names, ((int, float), int), (MAX_COST_USD, MAX_TOKENS)):
        value = arg(args, name, types, None)
        if value is None:
            continue
        if not 0 < value <= most or value != value:
            raise ProtocolError("bad_request", f"argument '{name}' must be a number > 0 (at most {most:g}), "
                                f"not {value!r}", {"field": name})
        budget[key] = value
    return budget or None


def nothing_spent() -> dict[str, Any]:
    """What a scope that spent nothing spent, in the shape of
    :meth:`hermesd.billing.ledger.Ledger.spent` (every count 0, ``cost_unknown`` false): the
    answer while no ``spend`` row exists, without importing the ledger."""
    return {"calls": 0, **dict.fromkeys(TOKEN_KEYS, 0), "tokens": 0, "cost_usd": 0.0, "cost_unknown": False}
