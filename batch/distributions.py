"""Toolset distributions: which toolsets each batch prompt gets.

A distribution gives every toolset it names an independent inclusion
probability.  For each prompt every toolset is drawn on its own; when none is
drawn, the most probable one is used (ties: the first in
``hermesd.contract.toolsets.TOOLSETS`` order), so a prompt never runs without tools by
chance.  Draws are seeded by the distribution's name and the prompt index, so a
resumed run — or a second run over the same dataset — gives every prompt the
same toolsets.

``delegation`` and ``kanban`` appear in no distribution: batch items are leaf
agents that produce one trajectory each.
"""

from __future__ import annotations

import random

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


def get(name: str) -> dict[str, float]:
    """The probabilities of distribution ``name``; raises :class:`UnknownDistribution`."""
    if name not in DISTRIBUTIONS:
        raise UnknownDistribution(name)
    return DISTRIBUTIONS[name]


def most_probable(name: str) -> str:
    """The toolset of ``name`` with the highest probability (ties: ``TOOLSETS`` order)."""
    probs = get(name)
    return max((t for t in TOOLSETS if t in probs), key=lambda t: probs[t])


def sample(name: str, index: int) -> list[str]:
    """The toolsets drawn for prompt ``index`` (in ``TOOLSETS`` order, never empty).

    Deterministic in ``(name, index)``.  Raises :class:`UnknownDistribution`.
    """
    probs = get(name)
    rng = random.Random(f"{name}:{index}")
    drawn = [t for t in TOOLSETS if t in probs and rng.random() < probs[t]]
    return drawn or [most_probable(name)]


def listing() -> dict[str, dict]:
    """Every distribution as ``{name: {"description", "toolsets": {toolset: p}}}``."""
    return {name: {"description": DESCRIPTIONS.get(name, ""), "toolsets": dict(probs)}
            for name, probs in DISTRIBUTIONS.items()}
