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
import re
import time
from typing import Any, Callable

import click
from click.shell_completion import CompletionItem

from client import approvals, batch, kanban, render, sessions, top, usage
from client.common import (COMPLETION_HELP, Ctl, conn, exit_for, fail, global_options, idempotency_option, is_json,
                           json_option, out, read_text, said_repeat, show, split, stopped_watching, text_input,
                           toolset_names, wait_job, working_dir)
from client.connection import GAP_EVENT, ClientError, Connection
from hermesd.contract import PROVIDERS, ROLES
from hermesd.protocol import ProtocolError


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
    show(conn().call("status"), render.status_text)


def oldest_first_option(fn: Callable) -> Callable:
    """``--oldest-first``: the order scripts want (people get the newest first)."""
    return click.option("--oldest-first", is_flag=True, help="Oldest first (default: newest first).")(fn)


def limit_option(what: str) -> Callable:
    """``--limit N``: show at most N (default: all, page after page)."""
    return click.option("--limit", type=click.IntRange(min=1), default=None,
                        help=f"Show at most this many {what} (default: all); says so when more exist.")


def take(items: Any, limit: int | None, what: str) -> list[Any]:
    """The first ``limit`` of ``items`` (an iterator; all when None), with a note on
    stderr when more exist."""
    taken = []
    for item in items:
        if limit is not None and len(taken) == limit:
            out(f"hermesctl: more {what} exist than --limit {limit} shows", err=True)
            break
        taken.append(item)
    return taken


@cli.command()
@json_option
@click.option("--all", "show_all", is_flag=True, help="Every job, not only running and queued ones.")
@click.option("--kind", default=None, help="Only jobs of this kind.")
@oldest_first_option
@limit_option("jobs")
def ps(show_all: bool, kind: str | None, oldest_first: bool, limit: int | None) -> None:
    """List running and queued jobs (or every job with --all), newest first."""
    args: dict[str, Any] = {"all": show_all, "order": "oldest" if oldest_first else "newest"}
    if kind:
        args["kind"] = kind
    records = take(conn().jobs(**args), limit, "jobs")
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
@click.option("--memory-limit", "memory_limit_mb", type=click.IntRange(min=1), default=None, metavar="MIB",
              help="Memory limit of the child and all it starts, in MiB (at most child_limits.memory_mb).")
@click.option("--cpu-limit", "cpu_limit_seconds", type=click.IntRange(min=1), default=None, metavar="SECONDS",
              help="CPU seconds per process of the job (at most child_limits.cpu_seconds).")
@click.option("--max-processes", type=click.IntRange(min=1), default=None, help="Processes (at most child_limits.processes).")
@click.option("--max-open-files", type=click.IntRange(min=1), default=None, help="Open files per process.")
@click.option("--timeout-seconds", type=float, default=None,
              help="Wall-clock limit (default: none; a child without activity for delegation.stale_after_seconds "
                   "is stopped anyway).")
@click.option("--after", default=None, metavar="ID[,ID]",
              help="Start once these jobs completed (fail if one does not).")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", help="Set a variable for the subagent (repeatable).")
@click.option("--output-schema", type=click.File("r", encoding="utf-8"), default=None, metavar="FILE",
              help="JSON Schema the final answer must validate against ('-': standard input).")
@click.option("--image", default=None,
              help="Run its terminal commands in a container of this image (docker or podman), the working "
                   "directory mounted at /workspace.")
@click.option("--no-resume", "no_resume", is_flag=True,
              help="If hermesd stops or dies while it runs, end it lost instead of resuming it at the next start.")
@idempotency_option
@click.option("--max-cost-usd", type=float, default=None, metavar="USD",
              help="Budget of the job and all its subagents: no model call starts once this is spent.")
@click.option("--max-tokens", type=int, default=None, metavar="TOKENS",
              help="Budget of the job and all its subagents in tokens (input and output).")
def delegate(goal: str | None, goal_file: Any, background: bool, queue: bool, context: str | None, toolsets: str | None,
             model: str | None, provider: str | None, role: str | None, max_turns: int | None,
             cwd: str | None, timeout_seconds: float | None, after: str | None, env: tuple[str, ...],
             output_schema: Any, image: str | None, no_resume: bool, idempotency_key: str | None,
             max_cost_usd: float | None, max_tokens: int | None, **resources: int | None) -> None:
    """Hand GOAL to a subagent ('-' or --goal-file: read it).  Foreground: wait, showing
    that it waits on a terminal, and print the result (Ctrl-C stops watching; the
    job goes on).  --background: print the job record (id, status) at once.
    While the queue is paused (hermesctl pause) the job is accepted and waits."""
    if queue and not background:
        raise click.UsageError("--queue needs --background (a foreground delegation waits for its result anyway)")
    goal = read_text(goal, goal_file, "goal")
    args: dict[str, Any] = {"goal": goal, "background": background, "queue": queue,
                            "cwd": os.path.abspath(cwd or working_dir())}
    for key, value in (("context", context), ("toolsets", toolset_names(toolsets)), ("model", model),
                       ("provider", provider), ("role", role), ("max_turns", max_turns), ("image", image),
                       ("timeout_seconds", timeout_seconds), ("after", split(after)),
                       ("env", env_pairs(env) or None), ("output_schema", json_file(output_schema, "--output-schema")),
                       ("resume", False if no_resume else None), ("idempotency_key", idempotency_key),
                       ("max_cost_usd", max_cost_usd), ("max_tokens", max_tokens), *resources.items()):
        if value is not None:
            args[key] = value
    record = conn().call("delegate", **args)
    said_repeat(record, record["id"])
    if record.get("queue_paused") and not is_json():
        out(f"{record['id']} queued: the queue is paused (hermesctl resume)", err=True)
    if background:
        return show(record, lambda r: f"{r['id']} {r['status']}")
    record = wait_job(record["id"])
    show(record, render.job_text)
    exit_for(record)


def env_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``("A=1", "B=x=y")`` → ``{"A": "1", "B": "x=y"}``; raises :class:`click.BadParameter` without ``=``."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--env")
        env[name] = value
    return env


def json_file(file: Any, option: str) -> Any:
    """The JSON value in ``file`` (None for None); raises :class:`click.BadParameter` naming the line."""
    if file is None:
        return None
    import json

    try:
        return json.loads(file.read())
    except ValueError as exc:
        raise click.BadParameter(f"{file.name}: not JSON: {exc}", param_hint=option) from None


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
@click.option("--since", type=click.IntRange(min=0), default=None,
              help="Only events with seq greater than this, oldest first.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they come (survives daemon "
              "restarts); starts with the last 10 (-n) unless --since says where.")
@click.option("-n", "--lines", "lines", type=click.IntRange(min=0), default=None, metavar="N",
              help="The last N events, oldest first (with --follow: then the new ones; default 10).")
@click.option("--type", "types", multiple=True, help="Only events of this type (repeatable).")
@oldest_first_option
@limit_option("events")
def events(since: int | None, follow: bool, lines: int | None, types: tuple[str, ...], oldest_first: bool,
           limit: int | None) -> None:
    """Print events from the log (each with seq, type, time, job), newest first;
    --since, -n or --oldest-first: in order.  --follow starts at the end, as
    journalctl -f does (the last 10, or -n N).  Where retention removed events
    a line says so (type events.removed)."""
    if since is None and (follow or lines is not None):
        connection = conn()
        end = connection.call("events_since", since=0, limit=1)["last_seq"]
        last = []
        for event in connection.events_newest_first(list(types) or None):
            if len(last) >= (10 if lines is None else lines):
                break
            if event["seq"] <= end:
                last.append(event)
        for event in reversed(last):
            _print_event(event)
        if not follow:
            return
        since = end
    if since is None and not follow and not oldest_first:
        stream = conn().events_newest_first(list(types) or None)
    else:
        stream = (e for e in conn().follow(since or 0, follow=follow)
                  if not types or e["type"] in types or e["type"] == GAP_EVENT)
    for event in (stream if follow else take(stream, limit, "events")):
        _print_event(event)


def _print_event(event: dict[str, Any]) -> None:
    render.emit_json(event) if is_json() else out(render.event_text(event))


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
    notification, or what a running batch needs)."""
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


@cli.command()
@json_option
def hello() -> None:
    """Print the daemon's version, protocol version, pid and capabilities."""
    show(conn().call("hello"), render.hello_text)


def main() -> None:
    """The full client (``hermesctl``'s entry point, :func:`client.main`, comes here for all
    but the commands :mod:`client.fast` answers)."""
    cli.main(prog_name="hermesctl")


for _family in (sessions.COMMANDS, kanban.COMMANDS, approvals.COMMANDS, usage.COMMANDS,
                (top.top_command, batch.batch_group)):
    for _command in _family:
        cli.add_command(_command)
