"""``hermesctl send | chat | sessions | history``: talking to the persistent agent.

Thin: each command is one ``session.*`` request (slash commands are handled by
the daemon), plus event following to show turns as they end.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import click

from client import render
from client.connection import Connection
from client.ctl import _exit_for, _wait, conn, is_json, json_option, show, working_dir


def _reply_text(record: dict[str, Any]) -> str:
    text = record.get("summary") or ""
    if record.get("status") != "completed":
        text += f"\n[turn {record['status']}: {record.get('error') or record.get('exit_reason')}]"
    return text.strip()


def _send(session: str, text: str, toolsets: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"session": session, "text": text, "cwd": working_dir()}
    if toolsets:
        args["toolsets"] = [t.strip() for t in toolsets.split(",") if t.strip()]
    return conn().call("session.send", **args)


@click.command()
@json_option
@click.argument("session")
@click.argument("text")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the turn to end and print the reply.")
@click.option("--toolsets", default=None,
              help="Comma-separated toolsets of a NEW session (default: the config's + delegation; "
                   "add kanban for an orchestrator).")
def send(session: str, text: str, wait_: bool, toolsets: str | None) -> None:
    """Send TEXT to SESSION (created if new).  Slash commands: /background PROMPT, /stop, /tasks, /help."""
    answer = _send(session, text, toolsets)
    if "turn" not in answer:
        return show(answer, render.slash_text)
    if not wait_:
        return show(answer, lambda a: f"{a['turn']['id']} {a['turn']['status']}")
    record = _wait(answer["turn"]["id"], None)
    show(record, _reply_text)
    _exit_for(record)


def _print_deliveries(runtime_dir: Any, session: str, since: int, stop: threading.Event) -> None:
    """Worker thread of ``chat``: print turns that delivered a background completion."""
    follower = Connection(runtime_dir)
    for event in follower.follow(since, idle=0.5):
        if stop.is_set():
            return
        data = event.get("data") or {}
        if event["type"] == "session.turn" and event.get("session") == session and data.get("notification"):
            click.echo(f"\n[background result {data['notification']} delivered]\nagent> {data.get('reply', '')}\n"
                       "you> ", nl=False)


@click.command()
@json_option
@click.argument("session", default="main")
def chat(session: str) -> None:
    """Talk to SESSION interactively (default: main).  Background results appear as they are delivered.
    With --json each turn's job record is printed as one JSON line."""
    obj = click.get_current_context().find_root().obj
    since = conn().call("events_since", since=0, limit=1)["last_seq"]
    stop = threading.Event()
    threading.Thread(target=_print_deliveries, args=(obj.get("runtime_dir"), session, since, stop),
                     daemon=True).start()
    click.echo(f"session {session}: type a message, /help for commands, Ctrl-D to leave")
    while True:
        try:
            text = input("you> ")
        except EOFError:
            click.echo()
            break
        if not text.strip():
            continue
        answer = _send(session, text)
        if "turn" in answer:
            record = _wait(answer["turn"]["id"], None)
            show(record, lambda r: f"agent> {_reply_text(r)}")
        else:
            show(answer, render.slash_text)
    stop.set()
    sys.exit(0)


@click.command()
@json_option
def sessions() -> None:
    """List sessions: messages, busy, pending notifications, running children."""
    rows = conn().call("session.list")["sessions"]
    if is_json():
        for row in rows:
            render.emit_json(row)
        return
    for row in rows:
        click.echo(f"{row['id']:<20} {row['messages']:>5} messages  {'busy' if row['busy'] else 'idle'}  "
                   f"{row['running_children']} children  {row['pending_notifications']} pending")
    if not rows:
        click.echo("no sessions")


@click.command()
@json_option
@click.argument("session")
def history(session: str) -> None:
    """Print SESSION's messages in order (with --json: one per line, with role, content, time, notification)."""
    for msg in conn().call("session.history", session=session)["messages"]:
        if is_json():
            render.emit_json(msg)
        else:
            mark = f" (delivered {msg['notification']})" if msg["notification"] else ""
            click.echo(f"[{msg['time']}] {msg['role']}{mark}: {msg['content']}")


COMMANDS = (send, chat, sessions, history)
