"""What model calls cost: a price table per model, in USD per million tokens.

Defaults for current Anthropic and OpenAI models (:data:`DEFAULT_PRICES`); the
config's ``prices:`` section adds models and overrides these, one mapping per
model name::

    prices:
      claude-sonnet-4-6: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.3}
      my-local-model: {input: 0, output: 0}

``input`` and ``output`` are required; ``cache_write`` (the five-minute
lifetime) and ``cache_read`` default to ``input`` (no discount assumed, so a
bill is never under-counted).  A model with no price here has tokens but no
cost: it is shown as unknown, never as 0.

Names are matched after :func:`model_key`: lower case, a router's ``vendor/``
prefix dropped (OpenRouter's ``anthropic/claude-sonnet-4.6``), dots as dashes,
a date suffix dropped (``claude-haiku-4-5-20251001``).  A leaf: imports only
the standard library and the provider table (:mod:`hermesd.contract.providers`, a leaf too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from hermesd.contract.providers import provider_entry

MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """One model's prices, USD per million tokens: uncached ``input``, ``output``,
    ``cache_write`` (a five-minute cache write) and ``cache_read``."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, tokens: Mapping[str, int]) -> float:
        """USD of ``tokens`` (``contract.tokens.TOKEN_KEYS``: ``input`` counts every prompt
        token, the cache's writes and reads among them, so the uncached rest is
        ``input - cache_write - cache_read``)."""
        write, read = int(tokens.get("cache_write") or 0), int(tokens.get("cache_read") or 0)
        uncached = max(0, int(tokens.get("input") or 0) - write - read)
        return (uncached * self.input + int(tokens.get("output") or 0) * self.output
                + write * self.cache_write + read * self.cache_read) / MILLION


def _p(input: float, output: float, cache_write: float, cache_read: float) -> Price:  # noqa: A002
    return Price(input, output, cache_write, cache_read)


DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic, from https://platform.claude.com/docs/en/about-claude/pricing and the models'
    # overview pages (https://platform.claude.com/docs/en/about-claude/models), read 2026-12-01:
    # base input, output, 5-minute cache write (1.25x input), cache hit.
    "claude-fable-5-1": _p(10, 50, 12.5, 0.25),
    "claude-opus-5-5": _p(4, 20, 5, 0.2),
    "claude-opus-5": _p(5, 25, 6.25, 0.5),
    "claude-opus-4-8": _p(5, 25, 6.25, 0.5),
    "claude-opus-4-7": _p(5, 25, 6.25, 0.5),
    "claude-opus-4-6": _p(5, 25, 6.25, 0.5),
    "claude-opus-4-5": _p(5, 25, 6.25, 0.5),
    "claude-opus-4-1": _p(15, 75, 18.75, 1.5),
    "claude-opus-4": _p(15, 75, 18.75, 1.5),
    "claude-sonnet-5-5": _p(2, 10, 2.5, 0.2),
    "claude-sonnet-5": _p(2, 10, 2.5, 0.2),
    "claude-sonnet-4-6": _p(3, 15, 3.75, 0.3),
    "claude-sonnet-4-5": _p(3, 15, 3.75, 0.3),
    "claude-sonnet-4": _p(3, 15, 3.75, 0.3),
    "claude-haiku-5-5": _p(0.1, 0.5, 0.125, 0.01),  # prompts up to 100k tokens
    "claude-haiku-4-5": _p(1, 5, 1.25, 0.1),
    "claude-haiku-3-5": _p(0.8, 4, 1, 0.08),
    # OpenAI, from https://developers.openai.com/api/docs/pricing (standard tier), read 2026-12-01:
    # input, output, cache write (OpenAI charges none over input), cached input.
    "gpt-5-4": _p(2.5, 15, 2.5, 0.25),
    "gpt-5-4-mini": _p(0.75, 4.5, 0.75, 0.075),
    "gpt-5-2": _p(1.75, 14, 1.75, 0.175),
    "gpt-5": _p(1.25, 10, 1.25, 0.125),
    "gpt-5-mini": _p(0.25, 2, 0.25, 0.025),
    "gpt-4-1": _p(2, 8, 2, 0.5),
    "gpt-4o": _p(2.5, 10, 2.5, 1.25),
    "gpt-4o-mini": _p(0.15, 0.6, 0.15, 0.075),
}
"""Prices of current models by :func:`model_key` (USD per million tokens; sources in the comments)."""

FREE = Price(0.0, 0.0, 0.0, 0.0)
"""The price of a ``free`` provider's calls (:data:`hermesd.contract.providers.TRAITS`)."""

_DATE = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")


def model_key(model: str) -> str:
    """The name a model is priced under: ``anthropic/Claude-Sonnet-4.6-20260101`` → ``claude-sonnet-4-6``."""
    name = model.strip().lower().rpartition("/")[2].replace(".", "-")
    return _DATE.sub("", name)


def price_of(model: str | None, table: Mapping[str, Price], provider: str | None = None) -> Price | None:
    """The :class:`Price` of ``model`` in ``table`` (keys as :func:`model_key` makes them), or
    None when it has none (its cost is unknown); :data:`FREE` for a provider with the trait
    ``free`` (:data:`hermesd.contract.providers.PROVIDER_TABLE`) whatever the model is called (a
    scripted job given the config's ``model: claude-…`` still calls no model)."""
    entry = provider_entry(provider)
    if entry is not None and entry.free:
        return FREE
    return table.get(model_key(model)) if model else None


FIELDS = ("input", "output", "cache_write", "cache_read")


def parse_prices(data: Any) -> tuple[dict[str, Price], list[tuple[str, str]]]:
    """The config's ``prices:`` mapping as ``(table, problems)``: the table has
    :data:`DEFAULT_PRICES` with the configured models added or replaced (keys by
    :func:`model_key`); each problem is ``(dotted key below prices, reason)``.
    A price must be a number >= 0; ``input`` and ``output`` are required."""
    table = dict(DEFAULT_PRICES)
    problems: list[tuple[str, str]] = []
    if data is None:
        return table, problems
    if not isinstance(data, dict):
        return table, [("", "must be a mapping of model names to {input, output, cache_write, cache_read}")]
    for model, entry in data.items():
        if not isinstance(entry, dict):
            problems.append((f"{model}", "must be a mapping such as {input: 3, output: 15, cache_write: 3.75, "
                                         "cache_read: 0.3} (USD per million tokens)"))
            continue
        values: dict[str, float] = {}
        for key, value in entry.items():
            if key not in FIELDS:
                problems.append((f"{model}.{key}", f"unknown key (known keys: {', '.join(FIELDS)})"))
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                problems.append((f"{model}.{key}", f"must be a number >= 0 (USD per million tokens), not {value!r}"))
            else:
                values[key] = float(value)
        missing = [k for k in ("input", "output") if k not in entry]
        if missing:
            problems.append((f"{model}", f"needs {' and '.join(missing)} (USD per million tokens)"))
        if "input" in values and "output" in values:
            table[model_key(str(model))] = Price(values["input"], values["output"],
                                                 values.get("cache_write", values["input"]),
                                                 values.get("cache_read", values["input"]))
    return table, problems
