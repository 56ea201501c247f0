"""How the Kanban board's events read in a client (``hermesctl events``, ``kanban watch``, ``top``).

A leaf found by file (:func:`hermesd.paths.plugin_modules`) and imported by the clients only when
they show an event of a job type: it imports nothing but :mod:`hermesd.protocol`.
"""

from __future__ import annotations

from hermesd.protocol import one_line

CLIENT = "client.kanban"
"""The module of its commands in ``hermesctl`` (``COMMANDS``; :func:`client.ctl.families`)."""


def subject(etype: str, data: dict) -> str | None:
    """A ``kanban.*`` event is about its task (None: not this package's event, or no task)."""
    return str(data["task"]) if etype.startswith("kanban.") and data.get("task") else None


def what(etype: str, data: dict) -> str | None:
    """The one-line gist of a ``kanban.*`` event (None: not this package's event)."""
    if not etype.startswith("kanban."):
        return None
    reason = f" ({one_line(data.get('reason'), 120)})" if data.get("reason") else ""
    if etype == "kanban.status":
        return f"{data.get('previous')} -> {data.get('status')}{reason}"
    if etype == "kanban.created":
        return f"for {data.get('assignee')}" + (f" after {', '.join(data['parents'])}" if data.get("parents") else "")
    if etype == "kanban.claimed":
        return f"worker {data.get('worker')} (attempt {data.get('attempt')})"
    if etype == "kanban.commented":
        return f"{data.get('author')}: {one_line(data.get('text'), 120)}"
    if etype in ("kanban.linked", "kanban.unlinked"):
        return f"{data.get('parent')} -> {data.get('child')}"
    return one_line(data.get("reason") or data.get("error"), 160)
