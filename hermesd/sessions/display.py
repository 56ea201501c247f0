"""How the sessions' events read in a client (a leaf: see :mod:`hermesd.kanban.display`)."""

from __future__ import annotations

from hermesd.protocol import one_line

CLIENT = "client.sessions"
"""The module of its commands in ``hermesctl`` (``COMMANDS``; :func:`client.ctl.families`)."""


def what(etype: str, data: dict) -> str | None:
    """The one-line gist of a ``session.turn`` event: its status and reply (None: another event)."""
    return f"{data.get('status')}: {one_line(data.get('reply'), 100)}" if etype == "session.turn" else None
