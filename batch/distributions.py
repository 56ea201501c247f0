"""Toolset distributions: which toolsets each batch prompt gets.

A distribution gives every toolset it names an independent inclusion
probability.  For each prompt every toolset is drawn on its own; when none is
drawn, the most probable one is used (ties: the first in
``hermesd.contract.toolsets.TOOLSETS`` order), so a prompt never runs without tools by
chance.  Draws are seeded by the distribution's name and the prompt index, so a
resumed run — or a second run over the same dataset — gives every prompt the
same toolsets.

``delegation`` and ``kanban`` appear in no distribution: batch items are leaf
agents that produce one trajectory each.  The config may add distributions of its own
(``batch.distributions:``, :func:`parse`), with MCP servers' toolsets (``mcp:NAME``) too;
a run keeps the probabilities it started with (``Settings.distribution_toolsets``).
"""

from __future__ import annotations

from typing import Any

from hermesd.contract.toolsets import TOOLSETS

DEFAULT = "default"

DISTRIBUTIONS: dict[str, dict[str, float]] = {
    "default": {"terminal": 1.0, "file": 1.0, "web": 1.0},
    "development": {"terminal": 0.9, "file": 0.9, "web": 0.3},
    "research": {"web": 0.95, "file": 0.6, "terminal": 0.2},
    "balanced": {"terminal": 0.5, "file": 0.5, "web": 0.5},
    "no_web": {"terminal": 1.0, "file": 1.0},
    "terminal_only": {"terminal": 1.0},
    "file_only": {"file": 1.0},
    "web_only": {"web": 1.0},
}
"""Name → ``{toolset: probability in (0, 1]}``."""

DESCRIPTIONS: dict[str, str] = {
    "default": "every batch toolset, always",
    "development": "terminal and file tools mostly, sometimes the web",
    "research": "web tools mostly, sometimes files and the terminal",
    "balanced": "each toolset half of the time",
    "no_web": "terminal and file tools, no network",
    "terminal_only": "only the terminal",
    "file_only": "only the file tools",
    "web_only": "only the web tools",
}


class UnknownDistribution(ValueError):
    """A distribution name that is not in :data:`DISTRIBUTIONS`; the message lists the known ones."""

    def __init__(self, name: str):
        super().__init__(f"unknown distribution {name!r}; known: {', '.join(DISTRIBUTIONS)} "
                         "(hermes-batch --list_distributions describes them)")


def get(name: str, probs: dict[str, float] | None = None) -> dict[str, float]:
    """The probabilities of distribution ``name`` (``probs``: a distribution of the config's
    ``batch.distributions``, as the run keeps it); raises :class:`UnknownDistribution`."""
    if probs is not None:
        return probs
    if name not in DISTRIBUTIONS:
        raise UnknownDistribution(name)
    return DISTRIBUTIONS[name]


def _order(probs: dict[str, float]) -> list[str]:
    """The toolsets of ``probs`` in ``TOOLSETS`` order, then the others (``mcp:NAME``) as given."""
    return [t for t in TOOLSETS if t in probs] + [t for t in probs if t not in TOOLSETS]


def most_probable(name: str, probs: dict[str, float] | None = None) -> str:
    """The toolset of ``name`` with the highest probability (ties: :func:`_order`)."""
    probs = get(name, probs)
    return max(_order(probs), key=lambda t: probs[t])


def sample(name: str, index: int, probs: dict[str, float] | None = None) -> list[str]:
    """The toolsets drawn for prompt ``index`` (in :func:`_order`, never empty); ``probs``: the
    run's own distribution (the config's ``batch.distributions``, kept in its settings).

    Deterministic in ``(name, index)``.  Raises :class:`UnknownDistribution`.
    """
    import random  # here: the daemon loads it at its first use (hermesd.daemon.DEFERRED)

    probs = get(name, probs)
    rng = random.Random(f"{name}:{index}")
    drawn = [t for t in _order(probs) if rng.random() < probs[t]]
    return drawn or [most_probable(name, probs)]


def parse(data: Any) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]]]:
    """The config's ``batch.distributions:`` (name → ``{toolset: probability in (0, 1]}``; a toolset
    of :data:`TOOLSETS` but ``delegation`` and ``kanban``, or ``mcp:NAME``) as ``(table, problems)``;
    a name of :data:`DISTRIBUTIONS` is taken."""
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [("", "must be a mapping of distribution names to {toolset: probability}")]
    table, problems = {}, []
    for name, probs in data.items():
        if name in DISTRIBUTIONS:
            problems.append((str(name), f"{name!r} is a distribution of hermesd's own; choose another name"))
            continue
        if not isinstance(probs, dict) or not probs:
            problems.append((str(name), "must be a mapping of toolsets to probabilities, e.g. {file: 1.0, mcp:git: 0.5}"))
            continue
        bad = [(f"{name}.{t}", why) for t, p in probs.items() for why in [_problem(t, p)] if why]
        problems += bad
        if not bad:
            table[str(name)] = {str(t): float(p) for t, p in probs.items()}
    return table, problems


def _problem(toolset: Any, p: Any) -> str:
    if not isinstance(toolset, str) or not (toolset in TOOLSETS or toolset.startswith("mcp:")) \
            or toolset in ("delegation", "kanban"):
        return "must be a toolset of a batch item (terminal, file, web, or mcp:NAME)"
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        return f"its probability must be a number in (0, 1], not {p!r}"
    return ""


def listing() -> dict[str, dict]:
    """Every distribution as ``{name: {"description", "toolsets": {toolset: p}}}``."""
    return {name: {"description": DESCRIPTIONS.get(name, ""), "toolsets": dict(probs)}
            for name, probs in DISTRIBUTIONS.items()}
