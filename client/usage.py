"""``hermesctl usage``: the bill — tokens and cost of every model call, grouped."""

from __future__ import annotations

from typing import Any

import click

from client import render
from client.common import conn, is_json, json_option, out

BY = ("job", "tree", "session", "batch", "task", "model", "day")
COLUMNS = ("calls", "input", "cache_write", "cache_read", "output")


@click.command()
@json_option
@click.option("--since", default=None, metavar="TIME",
              help="From this ISO 8601 date or time on (a date is its midnight UTC; default: everything).")
@click.option("--by", "by", type=click.Choice(BY), default="day", show_default=True,
              help="Group by job, delegation tree, session, batch run, Kanban task, model or UTC day.")
def usage(since: str | None, by: str) -> None:
    """What model calls spent: input, cache-write, cache-read and output tokens and the cost in
    USD, per job, tree, session, batch run, Kanban task, model or day, and the total.  INPUT
    counts every prompt token (the cache's writes and reads among them).  A model without a
    price (prices: in the config) shows its tokens and a cost of "unknown", never 0."""
    args: dict[str, Any] = {"by": by}
    if since:
        args["since"] = since
    answer = conn().call("usage", **args)
    if is_json():
        render.emit_json(answer)
        return
    if not answer["rows"]:
        out("nothing spent" + (f" since {since}" if since else ""))
        return
    out(usage_text(answer))


def usage_text(answer: dict[str, Any]) -> str:
    """The ``usage`` reply as a table: one row per group, then the total."""
    head = (answer["by"].upper(), *(c.replace("_", " ").upper() for c in COLUMNS), "COST")
    rows = [(render.one_line(str(r["key"] if r["key"] is not None else "-"))
             + (f" ({r['kind']})" if r.get("kind") else ""), *(str(r[c]) for c in COLUMNS), render.cost_text(r))
            for r in answer["rows"]]
    rows.append(("total", *(str(answer["total"][c]) for c in COLUMNS), render.cost_text(answer["total"])))
    widths = [max(len(cells[i]) for cells in (head, *rows)) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(cells, widths))).rstrip() for cells in (head, *rows))


COMMANDS = (usage,)
