"""``hermesctl top``: the command.  On a terminal it runs the textual app
(:mod:`client.tui`, imported only then, so other commands never load textual);
without one (cron, pipes), or with ``--once``/``--json``, it prints one snapshot
of the :class:`client.top_board.Board`, fitted to ``COLUMNS``, else the terminal's width, else
:data:`client.top_board.SNAPSHOT_COLUMNS`."""

from __future__ import annotations

import sys

import click

from client import render
from client.top_board import SNAPSHOT_COLUMNS, Board, load, snapshot_text
from client.common import DEFAULT_TIMEOUT, conn, is_json, out, root_obj


@click.command("top")
@click.option("--json", "json_", is_flag=True, help="Print one snapshot as one JSON object and exit.")
@click.option("--once", is_flag=True, help="Print one text snapshot and exit (the default without a terminal).")
@click.option("--refresh", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between status refreshes in the TUI.")
def top_command(json_: bool, once: bool, refresh: float) -> None:
    """Live view of hermesd: the job tree (sessions → delegations → children; running jobs
    first, with model calls, cost, elapsed time and last activity, then finished ones, the
    newest first), caps, batch progress and
    recent events.  Keys: c cancel the selected job (asks first), a approve its
    approval request (asks first), d deny it (asks why), l show its log, q (or Ctrl-C) quit.
    Without a terminal (cron, pipes) it prints one snapshot instead.  A snapshot (--once) fits
    the width COLUMNS says, else the terminal's, else (no terminal: a pipe, a file, cron's mail)
    80 columns, as the live view does: a running job's row keeps its calls and cost, the goal
    giving up its tail first."""
    as_json = json_ or is_json()
    if as_json or once or not (sys.stdin.isatty() and sys.stdout.isatty()):
        board = load(conn(), Board())
        if as_json:
            return render.emit_json({"status": board.status, "caps": board.status.get("caps"),
                                     "batches": board.batches(), "tree": [n.to_json() for n in board.tree()],
                                     "last_seq": board.last_seq})
        return out(snapshot_text(board, render.terminal_columns() or SNAPSHOT_COLUMNS))
    conn().call("hello")  # fail early and clearly (exit 3) when the daemon is not running
    conn().close()
    from client.tui import TopApp

    obj = root_obj()
    TopApp(runtime_dir=obj.get("runtime_dir"), timeout=obj.get("timeout") or DEFAULT_TIMEOUT, refresh=refresh).run()


COMMANDS = (top_command,)
"""The family's commands (:mod:`client.ctl` adds them)."""
