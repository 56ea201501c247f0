"""The bill's part of ``config.yaml``: ``prices:`` and ``budgets:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermesd import prices as price_list
from hermesd.config import POSITIVE, section


@dataclass(frozen=True)
class Budgets:
    """``budgets:`` — limits on spend (see :mod:`hermesd.billing`), checked before each model
    call against what was spent plus what the calls in flight may still spend; unset: none.

    ``daily_cost_usd`` / ``daily_tokens``: all of this daemon's jobs together per UTC day;
    ``session_daily_cost_usd`` / ``session_daily_tokens``: each session (its turns and their
    subagents) per UTC day.  Tokens count input and output.
    """

    daily_cost_usd: float | None = field(default=None, metadata=POSITIVE)
    daily_tokens: int | None = field(default=None, metadata=POSITIVE)
    session_daily_cost_usd: float | None = field(default=None, metadata=POSITIVE)
    session_daily_tokens: int | None = field(default=None, metadata=POSITIVE)


@dataclass(frozen=True)
class Sections:
    """The bill's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`).  ``prices``: the
    ``prices:`` section as written (:mod:`hermesd.prices`; :meth:`price_table`)."""

    prices: dict[str, Any] = field(default_factory=dict, metadata={"check": price_list.parse_prices})
    budgets: Budgets = section(Budgets)

    def price_table(self) -> dict[str, price_list.Price]:
        """The prices of models (:data:`hermesd.prices.DEFAULT_PRICES` and the ``prices:`` section)."""
        return price_list.parse_prices(self.prices)[0]
