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

import os
import time
from typing import Any

import click
from click.shell_completion import CompletionItem

from client import batch, kanban, render, sessions, top
from client.common import (COMPLETION_HELP, Ctl, conn, exit_for, global_options, is_json, json_option, out, read_text,
                           show, split, stopped_watching, text_input, wait_job, working_dir)
from client.connection import ClientError, Connection
from hermesd.contract import PROVIDERS, ROLES
from hermesd.protocol import ProtocolError


def complete_job_id(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a job id (click's ``shell_complete``): the daemon's
    jobs whose id starts with ``incomplete``, each with its status and goal.
    Nothing when the daemon does not answer within 2 s."""
    runtime_dir = ctx.find_root().params.get("runtime_dir")
    try:
        connection = Connection(runtime_dir, timeout=2.0)
        try:
            jobs = connection.call("ps", all=True, limit=200)["jobs"]
        finally:
            connection.close()
    except (ClientError, ProtocolError, OSError):
        return []
    return [CompletionItem(j["id"], help=f"{j['status']}: {j.get('goal') or ''}"[:70])
            for j in jobs if j["id"].startswith(incomplete)]


@click.group(cls=Ctl, context_settings={"help_option_names": ["-h", "--help"]}, epilog=COMPLETION_HELP)
@global_options
def cli() -> None:
    """hermesctl: control hermesd, the supervisor daemon for AI subagents.

    Exit codes: 0 ok, 2 usage or bad request, 3 daemon not running, 4 capacity
    reached, 5 not found, 6 invalid state, 7 invalid config, 8 version mismatch,
    9 timeout, 10 the job did not complete, 130 interrupted."""


@cli.command()
@json_option
def status() -> None:
    """Daemon status: pid, uptime, caps and how full they are, job counts."""
    st = conn().call("status")
    if is_json():
        return render.emit_json(st)
    out(f"hermesd {st['version']} pid {st['pid']} up {st['uptime_seconds']:.0f}s"
               f"{' (stopping)' if st['stopping'] else ''}")
    out(f"  children: {st['children']} running, {st['queued']} queued")
    for pool, use in st["caps"].items():
        out(f"  cap {pool}: {use['used']}/{use['limit'] if use['limit'] is not None else '-'}")
    out("  jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(st["jobs"].items())) or "none"))
    out(f"  start: {render.start_method(st.get('start') or {})}")
    out(f"  state: {st['state_db']}  runtime: {st['runtime_dir']}")


@cli.command()
@json_option
@click.option("--all", "show_all", is_flag=True, help="Every job, not only running and queued ones.")
@click.option("--kind", default=None, help="Only jobs of this kind.")
def ps(show_all: bool, kind: str | None) -> None:
    """List running and queued jobs (or every job with --all)."""
    args = {"all": show_all}
    if kind:
        args["kind"] = kind
    answer = conn().call("ps", **args)
    records = answer["jobs"]
    if answer.get("more"):
        out("hermesctl: more jobs than one reply holds; the oldest are shown (narrow with --kind)", err=True)
    if is_json():
        for rec in records:
            render.emit_json(rec)
    elif records:
        render.jobs_table(records)
    else:
        out("no jobs" if show_all else "no running or queued jobs")


@cli.command()
@json_option
@text_input("goal", "goal")
@click.option("--background", is_flag=True, help="Return at once; the result arrives as an async_delegation event.")
@click.option("--queue", is_flag=True, help="With --background: wait for a free slot instead of capacity_reached.")
@click.option("--context", default=None, help="Context for the subagent (what it needs to know).")
@click.option("--toolsets", default=None, help="Comma-separated toolsets (default: the config's toolsets).")
@click.option("--model", default=None, help="Model name.")
@click.option("--provider", default=None, type=click.Choice(PROVIDERS))
@click.option("--role", default=None, type=click.Choice(ROLES))
@click.option("--max-turns", type=click.IntRange(min=1), default=None)
@click.option("--cwd", default=None, type=click.Path(file_okay=False, exists=True),
              help="Working directory of the subagent (default: the current directory).")
def delegate(goal: str | None, goal_file: Any, background: bool, queue: bool, context: str | None, toolsets: str | None,
             model: str | None, provider: str | None, role: str | None, max_turns: int | None,
             cwd: str | None) -> None:
    """Hand GOAL to a subagent ('-' or --goal-file: read it).  Foreground: wait, showing
    that it waits on a terminal, and print the result (Ctrl-C stops watching; the
    job goes on).  --background: print the job record (id, status) at once."""
    goal = read_text(goal, goal_file, "goal")
    args: dict[str, Any] = {"goal": goal, "background": background, "queue": queue,
                            "cwd": os.path.abspath(cwd or working_dir())}
    for key, value in (("context", context), ("toolsets", split(toolsets)), ("model", model),
                       ("provider", provider), ("role", role), ("max_turns", max_turns)):
        if value is not None:
            args[key] = value
    record = conn().call("delegate", **args)
    if background:
        return show(record, lambda r: f"{r['id']} {r['status']}")
    record = wait_job(record["id"])
    show(record, render.job_text)
    exit_for(record)


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--timeout", "wait_timeout", type=click.FloatRange(min=0), default=None,
              help="Give up after this many seconds (exit 9).")
def wait(job_id: str, wait_timeout: float | None) -> None:
    """Block until JOB_ID is finished; print its record.  Exit 0 if it completed, 10 if not."""
    record = wait_job(job_id, wait_timeout)
    show(record, render.job_text)
    exit_for(record)


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--trajectory", is_flag=True, help="Include the ShareGPT trajectory the child recorded.")
def result(job_id: str, trajectory: bool) -> None:
    """Print the record and result of JOB_ID (with --trajectory: and the turns it recorded)."""
    record = conn().call("result", id=job_id, trajectory=trajectory)
    show(record, render.job_text)


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
def cancel(job_id: str) -> None:
    """Cancel JOB_ID (a running child is interrupted and ends cancelled with its partial output)."""
    record = conn().call("cancel", id=job_id)
    show(record, lambda r: f"{r['id']} {r['status']} (cancel requested)")


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows, until the job ends.")
def logs(job_id: str, follow: bool) -> None:
    """Print JOB_ID's log (the child's stdout and stderr; control characters escaped).
    A batch has no process of its own: its items' logs are printed, each under its id."""
    if job_id.startswith("batch_") or conn().call("job", id=job_id).get("kind") == "batch":
        items = [j for j in conn().call("ps", all=True, kind="batch_item")["jobs"] if j.get("parent") == job_id]
        if not items and not is_json():
            out(f"{job_id} has no items yet (hermesctl batch status {job_id})", err=True)
        for item in items:
            if not is_json():
                out(f"==> {item['id']} ({item['status']}: {render.short(item.get('goal'), 50)}) <==")
            _print_log(item["id"], follow=False)
        return
    try:
        _print_log(job_id, follow)
    except KeyboardInterrupt:
        stopped_watching(job_id, follow=f"hermesctl logs -f {job_id}")


def _print_log(job_id: str, follow: bool) -> None:
    offset = 0
    while True:
        chunk = conn().call("logs", id=job_id, offset=offset)
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


@cli.command()
@json_option
@click.option("--since", type=click.IntRange(min=0), default=0, help="Only events with seq greater than this.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events (survives daemon restarts).")
@click.option("--type", "types", multiple=True, help="Only events of this type (repeatable).")
def events(since: int, follow: bool, types: tuple[str, ...]) -> None:
    """Print events from the log (each with seq, type, time, job); --follow for new ones."""
    for event in conn().follow(since, follow=follow):
        if types and event["type"] not in types:
            continue
        if is_json():
            render.emit_json(event)
        else:
            out(render.event_text(event))


@cli.command()
@json_option
def shutdown() -> None:
    """Stop the daemon gracefully (children interrupted, states persisted)."""
    answer = conn().call("shutdown")
    show(answer, lambda a: f"hermesd (pid {a['pid']}) is stopping")


@cli.command()
@json_option
def reload() -> None:
    """Re-read the config file; an invalid file is refused and the running one kept."""
    answer = conn().call("reload")
    show(answer, lambda a: f"reloaded {a.get('source') or '(defaults)'}" + "".join(
        f"\n{key} changed: in force after a restart of hermesd" for key in a.get("restart_needed") or []))


@cli.command()
@json_option
def hello() -> None:
    """Print the daemon's version, protocol version, pid and capabilities."""
    show(conn().call("hello"), lambda h: render.fields_text({**h, "ops": None}) + f"\nops: {len(h['ops'])} "
         "(hermesctl --json hello lists them)")


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="hermesctl")


for _family in (sessions.COMMANDS, kanban.COMMANDS, (top.top_command, batch.batch_group)):
    for _command in _family:
        cli.add_command(_command)
