"""A session turn's part of the job spec (:class:`TurnSpec`, ``JobSpec.part`` of a ``session_turn``).

A leaf children import (:mod:`child.agent`'s ``run_turn``): the standard library and
:mod:`hermesd.contract` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermesd.contract.wire import Wire


@dataclass
class TurnSpec(Wire):
    """What a turn's child gets besides the common spec: ``history``, the session's earlier
    messages as a turn is sent them (``child.messages`` form, roles alternating; the latest
    summary and what came after it: :meth:`hermesd.sessions.compaction.Compactor.sent`)."""

    history: list[dict[str, Any]] | None = None
