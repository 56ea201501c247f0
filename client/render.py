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

from hermesd.protocol import one_line


def emit_json(obj: Any) -> None:
    """Print one JSON object on one line and flush."""
    click.echo(json.dumps(obj, ensure_ascii=False, default=str))
    sys.stdout.flush()


def console():
    """A rich console on stdout; no colour or markup effects unless stdout is a TTY."""
    from rich.console import Console

    return Console(no_color=not sys.stdout.isatty(), highlight=False, soft_wrap=True)


def short(text: Any, width: int = 60) -> str:
    """One line of at most ``width`` printable characters (control characters become spaces)."""
    return one_line(text, width)


def jobs_table(records: Iterable[dict[str, Any]]) -> None:
    """Print job records as a table: id, kind, status, age/duration, calls, goal.

    Every column but GOAL keeps its full width (an id must stay usable when
    copied); GOAL takes what is left of the terminal (at least 20 characters)
    and is cut with an ellipsis.
    """
    import shutil

    head = ("ID", "KIND", "STATUS", "DURATION", "CALLS")
    rows = []
    for rec in records:
        dur = rec.get("duration_seconds")
        rows.append(((rec["id"], rec.get("kind") or "", rec.get("status") or "",
                      f"{dur:.1f}s" if isinstance(dur, (int, float)) else "-", str(rec.get("api_calls") or 0)),
                     rec.get("goal")))
    widths = [max([len(col), *(len(cells[i]) for cells, _ in rows)]) for i, col in enumerate(head)]
    goal_width = max(20, shutil.get_terminal_size().columns - sum(widths) - 2 * len(widths) - 1)

    def line(cells: tuple[str, ...], goal: str) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + goal

    click.echo(line(head, "GOAL"))
    for cells, goal in rows:
        click.echo(line(cells, short(goal, goal_width)).rstrip())


def slash_text(answer: dict[str, Any]) -> str:
    """The answer of a slash command (``session.send`` with ``/…``) as readable lines."""
    command = answer.get("command")
    if command == "background":
        return f"background task {answer.get('delegation_id')} {answer.get('status')}; its result comes back as a new turn"
    if command == "stop":
        stopped = answer.get("stopped") or []
        return f"stopped {', '.join(stopped)}" if stopped else "nothing to stop"
    if command == "tasks":
        tasks = answer.get("tasks") or []
        return "\n".join(f"{t['id']}  {t.get('status')}  {short(t.get('goal'), 60)}" for t in tasks) or "no tasks"
    if command == "help":
        return "\n".join(str(c) for c in answer.get("commands") or [])
    return "\n".join(f"{k}: {v}" for k, v in answer.items())


def start_method(start: dict[str, Any]) -> str:
    """``status``'s ``start`` as a phrase: ``spawn``, or ``forkserver (zygote 123, 2 spares)``."""
    method = start.get("method") or "spawn"
    if method != "forkserver":
        return method
    zygote = f"zygote {start['zygote']}" if start.get("zygote") else "zygote warming up"
    return f"{method} ({zygote}, {start.get('spares', 0)} spare(s) held)"


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
