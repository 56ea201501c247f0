"""``hermesctl usage``: the bill — tokens and cost of every model call, grouped."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import click

from client import render
from client.common import Duration, conn, is_json, json_option, out
from hermesd.protocol import ProtocolError

BY = ("job", "tree", "session", "batch", "task", "model", "day")
COLUMNS = ("calls", "input", "cache_write", "cache_read", "output")
ISO_EXAMPLES = "2026-12-01, 2026-12-01T09:00:00Z"
AGO_EXAMPLES = "10m, 2h, 7d, 1d12h"


class Since(click.ParamType):
    """Where the bill starts: a duration back from now ending in its unit (``10m``, ``2h``,
    ``7d``, ``1d12h``: :class:`client.common.Duration`) as the UTC time it names
    (``2026-12-07T08:00:00Z``), else the text as typed, for the daemon to read as an ISO 8601
    date or time (a bare number too: ``20261201`` is a date, not seconds)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        seconds = Duration.seconds(text) if text[-1:].isalpha() else None
        if seconds is None:
            return text
        return datetime.fromtimestamp(time.time() - seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@click.command()
@json_option
@click.option("--since", type=Since(), default=None, metavar="TIME",
              help=f"From this ISO 8601 date or time on ({ISO_EXAMPLES}; a date is its midnight UTC), or from "
                   f"this long ago ({AGO_EXAMPLES}, as clean --older-than reads it); default: everything.")
@click.option("--by", "by", type=click.Choice(BY), default="day", show_default=True,
              help="Group by job, delegation tree, session, batch run, Kanban task, model or UTC day.")
def usage(since: str | None, by: str) -> None:
    """What model calls spent: input, cache-write, cache-read and output tokens and the cost in
    USD, per job, tree, session, batch run, Kanban task, model or day, and the total, since a
    date or time or for the last while (--since 2026-12-01, --since 2h).  INPUT counts every
    prompt token (the cache's writes and reads among them).  A model without a
    price (prices: in the config) shows its tokens and a cost of "unknown", never 0."""
    args: dict[str, Any] = {"by": by}
    if since:
        args["since"] = since
    try:
        answer = conn().call("usage", **args)
    except ProtocolError as err:
        if err.details.get("field") != "since":
            raise
        raise click.BadParameter(f"{since!r} is neither an ISO 8601 date or time ({ISO_EXAMPLES}) nor how long "
                                 f"ago ({AGO_EXAMPLES})", click.get_current_context(), param_hint="'--since'") from None
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
