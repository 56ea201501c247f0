"""Output for people and for programs.

With ``--json`` a command prints one JSON object per result (one per line for
lists and streams) and errors as ``{"error": {"code", "message"}}`` on stdout.
Without it, plain text and tables (``rich``), never colours when stdout is not
a terminal — so cron mail stays readable.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable

import click


def emit_json(obj: Any) -> None:
    """Print one JSON object on one line and flush."""
    click.echo(json.dumps(obj, ensure_ascii=False, default=str))
    sys.stdout.flush()


def console():
    """A rich console on stdout; no colour or markup effects unless stdout is a TTY."""
    from rich.console import Console

    return Console(no_color=not sys.stdout.isatty(), highlight=False, soft_wrap=True)


def short(text: Any, width: int = 60) -> str:
    """One line of at most ``width`` characters."""
    s = " ".join(str(text or "").split())
    return s if len(s) <= width else s[: width - 1] + "…"


def jobs_table(records: Iterable[dict[str, Any]]) -> None:
    """Print job records as a table: id, kind, status, age/duration, calls, goal."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("ID", "KIND", "STATUS", "DURATION", "CALLS", "GOAL"):
        table.add_column(col, no_wrap=True, overflow="ellipsis" if col == "GOAL" else "fold")
    for rec in records:
        dur = rec.get("duration_seconds")
        table.add_row(rec["id"], rec.get("kind") or "", rec.get("status") or "",
                      f"{dur:.1f}s" if isinstance(dur, (int, float)) else "-",
                      str(rec.get("api_calls") or 0), short(rec.get("goal"), 50))
    console().print(table)


def job_text(rec: dict[str, Any]) -> str:
    """A job record as readable lines."""
    tokens = rec.get("tokens") or {}
    lines = [f"{rec['id']}  {rec.get('kind')}  {rec.get('status')}"
             + (f" ({rec.get('exit_reason')})" if rec.get("exit_reason") else "")]
    for key in ("goal", "context", "model", "session", "parent", "dispatched_at", "started_at", "completed_at"):
        if rec.get(key):
            lines.append(f"  {key}: {rec[key]}")
    if rec.get("toolsets"):
        lines.append(f"  toolsets: {', '.join(rec['toolsets'])}")
    if rec.get("duration_seconds") is not None:
        lines.append(f"  duration: {rec['duration_seconds']:.2f}s")
    lines.append(f"  api_calls: {rec.get('api_calls') or 0}  tokens: {tokens.get('input', 0)} in / "
                 f"{tokens.get('output', 0)} out")
    if rec.get("error"):
        lines.append(f"  error: {rec['error']}")
    if rec.get("summary"):
        lines.append("  result:")
        lines += [f"    {line}" for line in str(rec["summary"]).splitlines()]
    return "\n".join(lines)


def event_text(event: dict[str, Any]) -> str:
    """One event as one line (``async_delegation`` events with their block below)."""
    data = event.get("data") or {}
    head = f"{event['seq']:>6} {event['time']} {event['type']:<18} {event.get('job') or '-'}"
    if event["type"] == "job.state":
        return f"{head} {data.get('previous')} -> {data.get('status')}"
    if event["type"] == "job.progress":
        return f"{head} turn {data.get('turn')} {data.get('tool') or ''}".rstrip()
    if event["type"] == "async_delegation":
        return f"{head}\n{data.get('block', '')}"
    return head
