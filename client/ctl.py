"""``hermesctl``: the thin command-line client of hermesd.

Every command is one request over the control socket (or a subscription to
events); the daemon's op docstrings are the reference for what each does.
``--json`` is accepted before or after the subcommand.  Exit codes:
0 success, 1 internal error, 2 usage or bad request, 3 daemon not running or
shutting down, 4 capacity_reached/depth_limit, 5 not found, 6 invalid state,
7 invalid config, 8 version mismatch, 9 timeout, 10 the job ended but did not
complete (``wait``, foreground ``delegate``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

import click
from click.shell_completion import CompletionItem

from client import render
from client.connection import ClientError, Connection
from hermesd.protocol import EXIT_CODES, ProtocolError

TERMINAL = ("completed", "failed", "interrupted", "timed_out", "cancelled", "lost")


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(dict)["json"] = True


def json_option(fn: Callable) -> Callable:
    """Add ``--json`` to a command (also accepted on the group)."""
    return click.option("--json", "json_", is_flag=True, expose_value=False, callback=_set_json,
                        is_eager=True, help="Machine-readable output: one JSON object per line.")(fn)


def is_json() -> bool:
    """True when ``--json`` was given anywhere on the command line."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and (ctx.find_root().obj or {}).get("json"))


def fail(code: str, message: str) -> None:
    """Report an error (stderr, and JSON on stdout with ``--json``) and exit with its code."""
    if is_json():
        render.emit_json({"error": {"code": code, "message": message}})
    ctx = click.get_current_context(silent=True)
    click.echo(f"{ctx.find_root().info_name if ctx else 'hermesctl'}: {message}", err=True)
    sys.exit(EXIT_CODES.get(code, 1))


def working_dir() -> str:
    """The current directory (a request's default ``cwd``); exits cleanly (``bad_request``,
    status 2) when the shell's directory was deleted under it."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        fail("bad_request", "the current directory no longer exists; cd elsewhere or pass --cwd")
        raise  # not reached: fail() exits


class Ctl(click.Group):
    """A click group that turns protocol and connection errors into clean exits."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ProtocolError as err:
            fail(err.code, err.message)
        except ClientError as err:
            fail(err.code, err.message)
        except KeyboardInterrupt:
            sys.exit(130)


def conn() -> Connection:
    """The connection of the current invocation."""
    obj = click.get_current_context().find_root().obj
    if "conn" not in obj:
        obj["conn"] = Connection(obj.get("runtime_dir"), timeout=obj.get("timeout", 10.0))
    return obj["conn"]


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


def show(obj: dict[str, Any], text: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print one result: JSON with ``--json``, else ``text(obj)`` or key: value lines."""
    if is_json():
        render.emit_json(obj)
    elif text is not None:
        click.echo(text(obj))
    else:
        for key, value in obj.items():
            click.echo(f"{key}: {value}")


@click.group(cls=Ctl, context_settings={"help_option_names": ["-h", "--help"]})
@json_option
@click.option("--runtime-dir", envvar="HERMES_RUNTIME_DIR", type=click.Path(file_okay=False), default=None,
              help="Runtime directory of the daemon's sockets.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Seconds to wait for a reply.")
@click.pass_context
def cli(ctx: click.Context, runtime_dir: str | None, timeout: float) -> None:
    """hermesctl: control hermesd, the supervisor daemon for AI subagents."""
    ctx.ensure_object(dict).update(runtime_dir=runtime_dir, timeout=timeout)


@cli.command()
@json_option
def status() -> None:
    """Daemon status: pid, uptime, caps and how full they are, job counts."""
    st = conn().call("status")
    if is_json():
        return render.emit_json(st)
    click.echo(f"hermesd {st['version']} pid {st['pid']} up {st['uptime_seconds']:.0f}s"
               f"{' (stopping)' if st['stopping'] else ''}")
    click.echo(f"  children: {st['children']} running, {st['queued']} queued")
    for pool, use in st["caps"].items():
        click.echo(f"  cap {pool}: {use['used']}/{use['limit'] if use['limit'] is not None else '-'}")
    click.echo("  jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(st["jobs"].items())) or "none"))
    click.echo(f"  start: {render.start_method(st.get('start') or {})}")
    click.echo(f"  state: {st['state_db']}  runtime: {st['runtime_dir']}")


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
        click.echo("hermesctl: more jobs than one reply holds; the oldest are shown (narrow with --kind)", err=True)
    if is_json():
        for rec in records:
            render.emit_json(rec)
    elif records:
        render.jobs_table(records)
    else:
        click.echo("no jobs" if show_all else "no running or queued jobs")


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _wait(job_id: str, timeout: float | None) -> dict[str, Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        chunk = 30.0 if deadline is None else max(0.0, min(30.0, deadline - time.monotonic()))
        try:
            answer = conn().call("wait", chunk + 10.0, id=job_id, timeout=chunk)
        except ClientError as err:
            if err.code != "timeout" and not (err.code == "daemon_not_running" and deadline is None):
                raise
            time.sleep(0.5)  # the daemon is restarting: try again
            continue
        if answer["done"]:
            return answer["job"]
        if deadline is not None and time.monotonic() >= deadline:
            fail("timeout", f"job {job_id} is still {answer['job']['status']} after {timeout:g}s")


def _exit_for(record: dict[str, Any]) -> None:
    if record.get("status") != "completed":
        sys.exit(EXIT_CODES["job_failed"])


@cli.command()
@json_option
@click.argument("goal")
@click.option("--background", is_flag=True, help="Return at once; the result arrives as an async_delegation event.")
@click.option("--queue", is_flag=True, help="With --background: wait for a free slot instead of capacity_reached.")
@click.option("--context", default=None, help="Context for the subagent (what it needs to know).")
@click.option("--toolsets", default=None, help="Comma-separated toolsets (default: the config's toolsets).")
@click.option("--model", default=None, help="Model name.")
@click.option("--provider", default=None, type=click.Choice(["anthropic", "openai-compat", "local", "scripted"]))
@click.option("--role", default=None, type=click.Choice(["leaf", "orchestrator"]))
@click.option("--max-turns", type=click.IntRange(min=1), default=None)
@click.option("--cwd", default=None, type=click.Path(file_okay=False, exists=True),
              help="Working directory of the subagent (default: the current directory).")
def delegate(goal: str, background: bool, queue: bool, context: str | None, toolsets: str | None,
             model: str | None, provider: str | None, role: str | None, max_turns: int | None,
             cwd: str | None) -> None:
    """Hand GOAL to a subagent.  Foreground: wait and print the result.
    --background: print the job record (id, status) at once."""
    args: dict[str, Any] = {"goal": goal, "background": background, "queue": queue,
                            "cwd": os.path.abspath(cwd or working_dir())}
    for key, value in (("context", context), ("toolsets", _split(toolsets)), ("model", model),
                       ("provider", provider), ("role", role), ("max_turns", max_turns)):
        if value is not None:
            args[key] = value
    record = conn().call("delegate", **args)
    if background:
        return show(record, lambda r: f"{r['id']} {r['status']}")
    record = _wait(record["id"], None)
    show(record, render.job_text)
    _exit_for(record)


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--timeout", "wait_timeout", type=click.FloatRange(min=0), default=None,
              help="Give up after this many seconds (exit 9).")
def wait(job_id: str, wait_timeout: float | None) -> None:
    """Block until JOB_ID is finished; print its record.  Exit 0 if it completed, 10 if not."""
    record = _wait(job_id, wait_timeout)
    show(record, render.job_text)
    _exit_for(record)


@cli.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--trajectory", is_flag=True, help="Include the ShareGPT trajectory the child recorded.")
def result(job_id: str, trajectory: bool) -> None:
    """Print the record and result of JOB_ID."""
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
    """Print JOB_ID's log (the child's stdout and stderr)."""
    offset = 0
    while True:
        chunk = conn().call("logs", id=job_id, offset=offset)
        if chunk["data"]:
            if is_json():
                render.emit_json({"job": job_id, "offset": offset, "data": chunk["data"]})
            else:
                click.echo(chunk["data"], nl=False)
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
            click.echo(render.event_text(event))


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
    show(conn().call("hello"))


def main() -> None:
    """Console-script entry point."""
    cli(obj={}, prog_name="hermesctl")



# Command families living in their own modules (imported last: they import this one).
from client.sessions import COMMANDS as _SESSION_COMMANDS  # noqa: E402

for _command in _SESSION_COMMANDS:
    cli.add_command(_command)
from client.top import top_command; cli.add_command(top_command)  # noqa: E402,E702  (hermesctl top)
from client.batch import batch_group; cli.add_command(batch_group)  # noqa: E402,E702
from client.kanban import COMMANDS as _KANBAN_COMMANDS  # noqa: E402  (hermesctl kanban, hermesctl profile)

for _command in _KANBAN_COMMANDS:
    cli.add_command(_command)
