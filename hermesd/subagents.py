"""The rules of every job type whose children are subagents, taken from ``delegation:``, declared once (core).

Every job type whose children are supervised as subagents (delegations, session
turns, batch items and drivers, Kanban workers) has its plugin derive from
:class:`SubagentRules`: its kinds' children get the ``delegation:`` section's
defaults (:func:`hermesd.delegation.config.child_defaults`), are interrupted as
stale after its ``stale_after_seconds`` and resume from their journal after a
restart as its ``resume_on_restart`` says; the zygote preloads the SDK of its ``provider``.  A job type with other rules overrides
the hooks instead.
"""

from __future__ import annotations

from typing import Any

from hermesd.config import Config
from hermesd.delegation.config import child_defaults
from hermesd.plugin import Plugin


class SubagentRules(Plugin):
    """A :class:`hermesd.plugin.Plugin` whose kinds' children follow the ``delegation:`` section."""

    @classmethod
    def warm_providers(cls, config: Config) -> tuple[str | None, ...]:
        """``delegation.provider``: the zygote preloads its SDK."""
        return (config.delegation.provider,)

    def spec_defaults(self, row: dict[str, Any]) -> dict[str, Any]:
        """A subagent's defaults: the ``delegation:`` section's (:func:`hermesd.delegation.config.child_defaults`)."""
        return child_defaults(self.ctx.config.delegation)

    def stale_after(self, row: dict[str, Any]) -> float | None:
        """``delegation.stale_after_seconds``."""
        return self.ctx.config.delegation.stale_after_seconds

    def resume_on_restart(self, row: dict[str, Any]) -> bool:
        """``delegation.resume_on_restart``."""
        return self.ctx.config.delegation.resume_on_restart
