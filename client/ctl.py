"""``hermesctl``: the thin command-line client of hermesd.

Every command is one request over the control socket (or a subscription to
events); the daemon's op docstrings are the reference for what each does.
``--json`` is accepted before or after the subcommand.  The global options,
output, errors and exit codes are in :mod:`client.common`; this module is the
top of the client's imports: it adds the command families of
:mod:`client.sessions`, :mod:`client.batch`, :mod:`client.kanban` and
:mod:`client.top`, which never import it.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

import click
from click.shell_completion import CompletionItem

from client import approvals, batch, dashboard, kanban, mcp, render, sessions, top, usage, verbs, worktrees
from client.common import (COMPLETION_HELP, Ctl, conn, fail, global_options, is_json, json_option, out, run, show,
                           stopped_watching)
from client.calls import Away
from client.connection import ClientError, Connection
from hermesd.protocol import ProtocolError, exit_codes_text


def complete_job_id(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a job id (click's ``shell_complete``): every job of the
    daemon whose id starts with ``incomplete``, newest first, each with its status
    and goal (the daemon filters by prefix and pages).  What arrived when the
    daemon stops answering within 2 s."""
    runtime_dir = ctx.find_root().params.get("runtime_dir")
    jobs: list[dict[str, Any]] = []
    try:
        connection = Connection(runtime_dir, timeout=2.0)
        try:
            for job in connection.jobs(all=True, order="newest", prefix=incomplete or None):
                jobs.append(job)
        finally:
            connection.close()
    except (ClientError, ProtocolError, OSError):
        pass
    return [CompletionItem(j["id"], help=f"{j['status']}: {j.get('goal') or ''}"[:70]) for j in jobs]


TYPES: dict[str, Any] = {"str": None, "int": int, "int1": click.IntRange(min=1), "int0": click.IntRange(min=0), "float": float,
                         "float0": click.FloatRange(min=0), "dir": click.Path(file_okay=False, exists=True),
                         "file": click.File("r", encoding="utf-8")}
"""Each kind of :class:`client.verbs.Opt` as click's parameter type."""


def click_param(param: verbs.Opt | verbs.Arg) -> Callable:
    """The click decorator of one parameter of a :class:`client.verbs.Verb`."""
    if isinstance(param, verbs.Arg):
        return click.argument(param.name, required=param.required,
                              shell_complete=complete_job_id if param.job else None)
    flags = (param.flag, param.short) if param.short else (param.flag,)
    if param.kind == "flag":
        return click.option(*flags, param.dest, is_flag=True, help=param.help)
    kind = click.Choice(param.choices()) if param.kind == "choice" else TYPES[param.kind]
    return click.option(*flags, param.dest, type=kind, default=None, multiple=param.multiple,
                        metavar=param.metavar, help=param.help)


def verb_command(verb: verbs.Verb) -> click.Command:
    """The click command of ``verb`` (``--json``, its parameters, its body's docstring as help)."""
    def command(**values: Any) -> None:
        run(verb.body, **values)

    command.__doc__ = verb.body.__doc__
    for param in reversed(verb.params):
        command = click_param(param)(command)
    return click.command(verb.name)(json_option(command))


@click.group(cls=Ctl, context_settings={"help_option_names": ["-h", "--help"]}, epilog=COMPLETION_HELP)
@global_options
def cli() -> None:
    """hermesctl: control hermesd, the supervisor daemon for AI subagents."""


cli.help = f"{cli.help}\n\n{exit_codes_text()}"


@cli.command()
@json_option
def pause() -> None:
    """Pause the queue: no job starts (running ones go on; new requests wait queued).
    Stays paused across a daemon restart, until hermesctl resume."""
    show(conn().call("pause"), lambda q: f"queue paused since {q['paused_at']}")


@cli.command()
@json_option
def resume() -> None:
    """Resume the queue: queued jobs start as the caps allow."""
    show(conn().call("resume"), lambda q: "queue running")


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
def retry(job_id: str) -> None:
    """Run the ended job JOB_ID again as a new job (same goal, settings and environment);
    prints the new job's record (retry_of: JOB_ID)."""
    record = conn().call("retry", id=job_id)
    show(record, lambda r: f"{r['id']} {r['status']} (retry of {job_id})")


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows, until the job ends.")
def logs(job_id: str, follow: bool) -> None:
    """Print JOB_ID's log (the child's stdout and stderr; control characters escaped).
    A batch has no process of its own: its items' logs are printed, each under its id.
    An item on a Ray cluster has its log on its node until it ends, then here (its last 128 KiB)."""
    kind = "batch" if job_id.startswith("batch_") else conn().call("job", id=job_id).get("kind")
    if kind == "batch":
        items = [j for k in ("batch_item", "ray_item") for j in conn().call("ps", all=True, kind=k)["jobs"]
                 if j.get("parent") == job_id]
        if not items and not is_json():
            out(f"{job_id} has no items yet (hermesctl batch status {job_id})", err=True)
        for item in items:
            if not is_json():
                out(f"==> {item['id']} ({item['status']}: {render.short(item.get('goal'), 50)}) <==")
            _print_log(item["id"], follow=False)
        return
    try:
        if kind == "ray_item" and not is_json():
            chunk = conn().call("logs", id=job_id, offset=0, limit=1)
            if not chunk["size"]:
                out((RAY_ITEM_NO_LOG if chunk["done"] else RAY_ITEM_LOG_WAITS).format(job=job_id), err=True)
                if chunk["done"] or not follow:
                    return
        _print_log(job_id, follow)
    except KeyboardInterrupt:
        stopped_watching(job_id, follow=f"hermesctl logs -f {job_id}")


RAY_ITEM_LOG_WAITS = ("{job} runs on a Ray node: its log is there, in the item's scratch directory "
                      "($TMPDIR/hermes-item-*/log on that node), until it ends; then its last 128 KiB are "
                      "here (hermesctl logs -f {job} waits for them)")
RAY_ITEM_NO_LOG = "{job} left no log: it never started on a node, or it was lost with its host or driver"


def _print_log(job_id: str, follow: bool) -> None:
    """Print ``job_id``'s log from its start; ``follow``: as it grows until the job ends, waiting
    for a daemon that goes away meanwhile (said once on stderr: :class:`client.calls.Away`)."""
    offset = 0
    away = Away(lambda text: out(f"hermesctl: {text}", err=True), f"the log of {job_id}")

    def read() -> dict[str, Any]:
        return conn().call("logs", id=job_id, offset=offset)

    while True:
        chunk = away.retry(read) if follow else read()
        if chunk["data"]:
            if is_json():
                render.emit_json({"job": job_id, "offset": offset, "data": chunk["data"]})
            else:
                out(chunk["data"], nl=False)
        offset = chunk["offset"]
        if chunk["offset"] < chunk["size"]:
            continue
        if not follow or chunk["done"]:
            return
        time.sleep(0.25)


class Duration(click.ParamType):
    """A duration: ``90`` (seconds), ``45s``, ``30m``, ``12h``, ``7d``, ``2w``, or sums
    such as ``1d12h``; converted to seconds."""

    name = "duration"
    UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        text = str(value).strip().lower()
        parts = re.fullmatch(r"(?:\d+(?:\.\d+)?[smhdw]?)+", text) and re.findall(r"(\d+(?:\.\d+)?)([smhdw]?)", text)
        if not parts:
            self.fail(f"{value!r} is not a duration (e.g. 90, 45s, 30m, 12h, 7d, 2w, 1d12h)", param, ctx)
        return sum(float(n) * self.UNITS[unit or "s"] for n, unit in parts)


@cli.command()
@json_option
@click.option("--older-than", type=Duration(), default=None,
              help="Finished jobs that ended longer ago than this (e.g. 30d, 12h); default: the config's "
                   "retention policy.")
@click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
def clean(older_than: float | None, dry_run: bool) -> None:
    """Remove finished jobs with their folders and events (never a running job, an undelivered
    notification, what a running batch needs, or a job whose git worktree is still there)."""
    args: dict[str, Any] = {"dry_run": dry_run}
    if older_than is not None:
        args["older_than_seconds"] = older_than
    answer = conn().call("clean", _timeout=max(conn().timeout, 600.0), **args)
    verb = "would remove" if dry_run else "removed"
    show(answer, lambda a: f"{verb} {a['jobs']} job(s), {a['events']} event(s)"
         + ("" if dry_run else f", {a['folders']} folder(s)") + f"; oldest event kept: seq {a['oldest_seq']}")


@cli.command()
@json_option
@click.option("--wait", "wait_", is_flag=True,
              help="Return once the daemon has exited (at most --timeout seconds, then exit 9).")
def shutdown(wait_: bool) -> None:
    """Stop the daemon gracefully (children interrupted, states persisted)."""
    connection = conn()
    answer = connection.call("shutdown")
    if wait_:
        deadline = time.monotonic() + connection.timeout
        while daemon_alive(answer["pid"]):
            if time.monotonic() >= deadline:
                fail("timeout", f"hermesd (pid {answer['pid']}) is still stopping after {connection.timeout:g}s")
            time.sleep(0.05)
        return show({**answer, "stopping": False, "stopped": True}, lambda a: f"hermesd (pid {a['pid']}) stopped")
    show(answer, lambda a: f"hermesd (pid {a['pid']}) is stopping")


def daemon_alive(pid: int) -> bool:
    """True while process ``pid`` exists and has not exited (an exited one its parent has not
    reaped yet, a zombie, is state ``Z`` in ``/proc/PID/stat``, proc(5))."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True


@cli.command()
@json_option
def reload() -> None:
    """Re-read the config file; an invalid file is refused and the running one kept."""
    answer = conn().call("reload")
    show(answer, lambda a: f"reloaded {a.get('source') or '(defaults)'}" + "".join(
        f"\n{key} changed: in force after a restart of hermesd" for key in a.get("restart_needed") or []))


def main() -> None:
    """The full client (``hermesctl``'s entry point, :func:`client.main`, comes here for all
    but the commands :mod:`client.fast` answers)."""
    cli.main(prog_name="hermesctl")


for _family in ([verb_command(v) for v in verbs.VERBS.values()], sessions.COMMANDS, kanban.COMMANDS,
                approvals.COMMANDS, usage.COMMANDS, worktrees.COMMANDS, dashboard.COMMANDS, mcp.COMMANDS,
                (top.top_command, batch.batch_group)):
    for _command in _family:
        cli.add_command(_command)
