"""``hermesctl kanban …`` and ``hermesctl profile …``: the board and the worker profiles.

Thin: each command is one ``kanban.*`` / ``profile.*`` request (the daemon's op
docstrings say what each does), except ``kanban watch``, which follows the
``kanban.*`` events (lines by :func:`client.render.event_text`).  With ``--json``: one object per result, one per line for
lists and streams.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from client import render
from client.common import (conn, idempotency_option, is_json, json_option, out, print_all, read_text, said_repeat, show,
                           split, text_input)
from hermesd.contract.providers import PROVIDERS
from hermesd.protocol import EXIT_CODES


def _author() -> str:
    return os.environ.get("USER") or "user"


COLUMNS = ("id", "status", "assignee", "priority")
"""The columns of a task line before its title."""


def _cells(task: dict[str, Any]) -> list[str]:
    return [render.short(task[key]) if key != "priority" else f"p{task[key]}" for key in COLUMNS]


def task_line(task: dict[str, Any], widths: list[int] | None = None) -> str:
    """One task as one line: id, status, assignee, priority, title (and why it is blocked);
    ``widths``: of the columns (:func:`column_widths` of a list, so that they line up), else each
    cell's own, two spaces apart either way."""
    cells = _cells(task)
    widths = widths or [len(c) for c in cells]
    line = "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + render.short(task["title"], 200)
    if task.get("parents"):
        line += f"  (after {', '.join(task['parents'])})"
    if task["status"] == "blocked" and task.get("block_reason"):
        line += f"\n{'':<{widths[0] + 2}}blocked: {render.short(task['block_reason'], 200)}"
    return line


def column_widths(tasks: list[dict[str, Any]]) -> list[int]:
    """The width of each column of :data:`COLUMNS` over ``tasks`` (the longest cell)."""
    return [max(len(cells[i]) for cells in map(_cells, tasks)) for i in range(len(COLUMNS))]


def task_text(task: dict[str, Any]) -> str:
    """A task with its result, artifacts and comments as readable lines."""
    lines = [f"{task['id']}  {task['status']}  [{task['board']}]  {task['title']}",
             (f"  assignee: {task['assignee']}  priority: {task['priority']}  attempts: {task['attempts']}"
              f"  failures: {task['failures']}")]
    for key in ("parents", "children", "artifacts"):
        if task.get(key):
            lines.append(f"  {key}: {', '.join(task[key])}")
    for key in ("worker", "claimed_by", "heartbeat_at", "block_reason", "last_error", "created_by", "created_at",
                "completed_at"):
        if task.get(key):
            lines.append(f"  {key}: {task[key]}")
    for key in ("body", "result"):
        if task.get(key):
            lines.append(f"  {key}:")
            lines += [f"    {line}" for line in str(task[key]).splitlines()]
    for c in task.get("comments") or []:
        lines.append(f"  [{c['time']}] {c['author']}: {c['text']}")
    return "\n".join(lines)


@click.group("kanban")
def kanban_group() -> None:
    """The Kanban board: tasks for worker profiles, run by the daemon's dispatcher."""


@kanban_group.command("create")
@json_option
@click.argument("title")
@click.option("--assignee", required=True, help="Profile that will run it (see `hermesctl profile list`).")
@click.option("--body", default=None, help="What the worker must do, self-contained ('-': standard input).")
@click.option("--body-file", type=click.File("r", encoding="utf-8"), default=None,
              help="Read the body from this file ('-': standard input).")
@click.option("--parent", "parents", multiple=True, help="Task it waits for (repeatable).")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--board", default=None, help="Board name (default: default).")
@click.option("--triage", is_flag=True, help="Park it in triage until `kanban unblock`.")
@click.option("--cwd", default=None, type=click.Path(file_okay=False, exists=True),
              help="Working directory of its worker (default: the board's directory under HERMES_HOME).")
@idempotency_option
def create(title: str, assignee: str, body: str | None, body_file: Any, parents: tuple[str, ...], priority: int,
           board: str | None, triage: bool, cwd: str | None, idempotency_key: str | None) -> None:
    """Put task TITLE on the board for profile --assignee; prints its id and status."""
    if body is not None or body_file is not None:
        body = read_text(body, body_file, "body")
    args: dict[str, Any] = {"title": title, "assignee": assignee, "parents": list(parents), "priority": priority,
                            "triage": triage, "author": _author()}
    for key, value in (("body", body), ("board", board), ("cwd", cwd and os.path.abspath(cwd)),
                       ("idempotency_key", idempotency_key)):
        if value is not None:
            args[key] = value
    task = conn().call("kanban.create", **args)
    said_repeat(task, task["id"])
    show(task, lambda t: f"{t['id']} {t['status']}")


def _link_command(name: str, help_text: str) -> click.Command:
    """``kanban link`` / ``kanban unlink``: op ``kanban.NAME`` on PARENT and CHILD, printing the child."""

    @kanban_group.command(name, help=help_text)
    @json_option
    @click.argument("parent")
    @click.argument("child")
    def command(parent: str, child: str) -> None:
        show(conn().call(f"kanban.{name}", parent=parent, child=child, author=_author()), task_line)

    return command


link = _link_command("link", "Make task CHILD wait for task PARENT.")
unlink = _link_command("unlink", "Make task CHILD stop waiting for task PARENT (it becomes ready when its "
                       "other parents are done).")


@kanban_group.command("list")
@json_option
@click.option("--board", default=None, help="Only this board (default: every board).")
@click.option("--status", default=None, help="Only tasks in this status.")
@click.option("--assignee", default=None, help="Only tasks of this profile.")
@click.option("--archived", is_flag=True, help="Include archived tasks.")
def list_(board: str | None, status: str | None, assignee: str | None, archived: bool) -> None:
    """List tasks, highest priority first (with --json: one task per line)."""
    args = {k: v for k, v in (("board", board), ("status", status), ("assignee", assignee)) if v is not None}
    tasks = conn().call("kanban.list", archived=archived, **args)["tasks"]
    widths = column_widths(tasks) if tasks else None
    print_all(tasks, lambda task: task_line(task, widths), "no tasks")


@kanban_group.command("show")
@json_option
@click.argument("task_id")
def show_(task_id: str) -> None:
    """Show task TASK_ID: status, assignee, result, artifacts, comments."""
    show(conn().call("kanban.show", id=task_id), task_text)


@kanban_group.command("comment")
@json_option
@click.argument("task_id")
@text_input("text", "comment")
def comment(task_id: str, text: str | None, text_file: Any) -> None:
    """Add TEXT to task TASK_ID's comments (its next worker reads them; '-' reads standard input)."""
    text = read_text(text, text_file, "text")
    show(conn().call("kanban.comment", id=task_id, text=text, author=_author()),
         lambda c: f"{c['task']}: comment added")


@kanban_group.command("unblock")
@json_option
@click.argument("task_id")
@click.option("--note", default=None, help="A note for the next worker (added as a comment).")
def unblock(task_id: str, note: str | None) -> None:
    """Put blocked task TASK_ID back in the queue."""
    args = {"note": note} if note else {}
    show(conn().call("kanban.unblock", id=task_id, author=_author(), **args), task_line)


@kanban_group.command("archive")
@json_option
@click.argument("task_id")
def archive(task_id: str) -> None:
    """Take task TASK_ID off the board (a worker still on it is stopped)."""
    show(conn().call("kanban.archive", id=task_id, author=_author()), task_line)


def can_move(tasks: list[dict[str, Any]]) -> list[str]:
    """Ids of the tasks that can still move without a person: ``ready`` and
    ``running`` ones, and ``todo`` ones whose every parent is done or can itself
    still finish.  A ``todo`` task behind a blocked, parked or archived parent
    waits for people, like the parent.  ``tasks``: ``kanban.list`` records."""
    by_id = {t["id"]: t for t in tasks}
    memo: dict[str, bool] = {}

    def can_finish(task_id: str) -> bool:
        if task_id not in memo:
            memo[task_id] = False  # a cycle cannot finish (links refuse cycles anyway)
            task = by_id.get(task_id)
            status = task["status"] if task else None
            memo[task_id] = status in ("done", "ready", "running") or (
                status == "todo" and all(can_finish(p) for p in task.get("parents") or []))
        return memo[task_id]

    return [t["id"] for t in tasks if t["status"] in ("ready", "running", "todo") and can_finish(t["id"])]


def _settled(board: str | None) -> bool:
    return not can_move(conn().call("kanban.list", **({"board": board} if board else {}))["tasks"])


@kanban_group.command("watch")
@json_option
@click.option("--board", default=None, help="Only events of this board.")
@click.option("--since", type=click.IntRange(min=0), default=None, help="Events after this seq (default: only new ones).")
@click.option("--until-settled", is_flag=True,
              help="Exit once no task can move without a person: none ready or running, and every todo "
                   "task waits behind a blocked, parked or archived one.")
def watch(board: str | None, since: int | None, until_settled: bool) -> None:
    """Follow the board: print kanban.* events as they happen."""
    if since is None:
        since = conn().call("events_since", since=0, limit=1)["last_seq"]
    def mine(event: dict[str, Any]) -> bool:
        return event["type"].startswith("kanban.") and (board is None or (event.get("data") or {}).get("board") == board)

    for event in conn().follow(since, follow=False):  # what has happened: printed even when settled
        if mine(event):
            render.emit_json(event) if is_json() else out(render.event_text(event))
        since = event["seq"]
    if until_settled and _settled(board):
        return
    for event in conn().follow(since, idle=0.5):
        if mine(event):
            render.emit_json(event) if is_json() else out(render.event_text(event))
            if until_settled and event["type"] == "kanban.status" and _settled(board):
                return


@click.group("profile")
def profile_group() -> None:
    """Worker profiles: what each Kanban worker is good at, and its model and toolsets."""


def _profile_text(p: dict[str, Any]) -> str:
    if p.get("error"):
        return f"{p['name']:<14} (broken: {p['error']})"
    extra = ", ".join([*(f"{k} {p[k]}" for k in ("model", "provider") if p.get(k)),
                       *(["a git worktree per worker"] if p.get("worktree") else [])])
    tools = ",".join(p["toolsets"]) if p.get("toolsets") is not None else "(config default)"
    return f"{p['name']:<14} {p['description']}\n{'':<14} toolsets: {tools}" + (f"; {extra}" if extra else "")


@profile_group.command("create")
@json_option
@click.argument("name")
@click.option("--description", required=True, help="What this worker is good at (orchestrators route by it).")
@click.option("--model", default=None, help="Model name (default: the daemon's).")
@click.option("--provider", default=None, type=click.Choice(PROVIDERS))
@click.option("--toolsets", default=None, help="Comma-separated toolsets (default: the config's).")
@click.option("--worktree", is_flag=True, help="Each worker runs in a git worktree of its own (branch hermes/JOB_ID); "
              "its tasks' working directory must be in a git repository.")
@click.option("--replace", is_flag=True, help="Overwrite an existing profile.")
def profile_create(name: str, description: str, model: str | None, provider: str | None, toolsets: str | None,
                   worktree: bool, replace: bool) -> None:
    """Create worker profile NAME (HERMES_HOME/profiles/NAME/config.yaml)."""
    args: dict[str, Any] = {"name": name, "description": description, "replace": replace}
    if worktree:
        args["worktree"] = True
    for key, value in (("model", model), ("provider", provider), ("toolsets", split(toolsets))):
        if value is not None:
            args[key] = value
    show(conn().call("profile.create", **args), lambda p: f"profile {p['name']} saved in {p['path']}")


@profile_group.command("list")
@json_option
def profile_list() -> None:
    """List profiles and what each is good at (a broken one with what is wrong, and exit 7)."""
    found = conn().call("profile.list")["profiles"]
    print_all(found, _profile_text, "no profiles")
    if any(p.get("error") for p in found):
        sys.exit(EXIT_CODES["invalid_config"])


@profile_group.command("show")
@json_option
@click.argument("name")
def profile_show(name: str) -> None:
    """Show profile NAME (unset fields left out; a broken file is named with its line)."""
    show(conn().call("profile.show", name=name),
         lambda p: render.fields_text({**p, "toolsets": p["toolsets"] if p.get("toolsets") is not None
                                       else "(config default)"}))


@profile_group.command("delete")
@json_option
@click.argument("name")
def profile_delete(name: str) -> None:
    """Delete profile NAME (refused while unfinished tasks are assigned to it)."""
    show(conn().call("profile.delete", name=name), lambda p: f"profile {p['name']} deleted")


COMMANDS = (kanban_group, profile_group)
