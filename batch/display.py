"""How a batch's events read in a client (a leaf: see :mod:`hermesd.kanban.display`)."""

from __future__ import annotations

CLIENT = "client.batch"
"""The module of its commands in ``hermesctl`` (``COMMANDS``; :func:`client.ctl.families`)."""
RUNS = ("batch",)
"""Its kinds whose jobs are runs of many items: ``hermesctl top`` shows their progress (:func:`client.render.run_kinds`)."""


def what(etype: str, data: dict) -> str | None:
    """The one-line gist of a ``batch.progress`` event: its counts (None: another event)."""
    if etype != "batch.progress":
        return None
    return f"{data.get('processed')}/{data.get('total')} done {data.get('done')} failed {data.get('failed')}"
