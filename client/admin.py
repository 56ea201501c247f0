"""``hermesctl``'s job and admin commands: ``pause``, ``resume``, ``retry``, ``logs``, ``clean``,
``shutdown``, ``reload`` (a command family: :data:`COMMANDS`, added by :mod:`client.ctl`)."""

from __future__ import annotations

import time
from typing import Any

import click

from client.common import (LOGS, Duration, complete_job_id, conn, fail, json_option, print_log, show,
                           stopped_watching)
from client.render import counted


@click.command()
@json_option
def pause() -> None:
    """Pause the queue: no job starts (running ones go on; new requests wait queued).
    Stays paused across a daemon restart, until hermesctl resume."""
    show(conn().call("pause"), lambda q: f"queue paused since {q['paused_at']}")


@click.command()
@json_option
def resume() -> None:
    """Resume the queue: queued jobs start as the caps allow."""
    show(conn().call("resume"), lambda q: "queue running")


@click.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
def retry(job_id: str) -> None:
    """Run the ended job JOB_ID again as a new job (same goal, settings and environment);
    prints the new job's record (retry_of: JOB_ID)."""
    record = conn().call("retry", id=job_id)
    show(record, lambda r: f"{r['id']} {r['status']} (retry of {job_id})")


@click.command()
@json_option
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows, until the job ends.")
def logs(job_id: str, follow: bool) -> None:
    """Print JOB_ID's log (the child's stdout and stderr; control characters escaped).
    A job kept elsewhere is printed its own way: a batch prints its items' logs, each under its id;
    an item on a Ray cluster has its log on its node until it ends, then here (its last 128 KiB)."""
    kind = conn().call("job", id=job_id).get("kind")
    printer = LOGS.get(kind)
    try:
        if printer is None:
            print_log(job_id, follow)
        else:
            printer(job_id, follow)
    except KeyboardInterrupt:
        stopped_watching(job_id, follow=f"hermesctl logs -f {job_id}")


@click.command()
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
    show(answer, lambda a: f"{verb} {counted(a['jobs'], 'job')}, {counted(a['events'], 'event')}"
         + ("" if dry_run else f", {counted(a['folders'], 'folder')}") + f"; oldest event kept: seq {a['oldest_seq']}")


@click.command()
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


@click.command()
@json_option
def reload() -> None:
    """Re-read the config file; an invalid file is refused and the running one kept."""
    answer = conn().call("reload")
    show(answer, lambda a: f"reloaded {a.get('source') or '(defaults)'}" + "".join(
        f"\n{key} changed: in force after a restart of hermesd" for key in a.get("restart_needed") or []))


COMMANDS = (pause, resume, retry, logs, clean, shutdown, reload)
"""The family's commands (:mod:`client.ctl` adds them to ``hermesctl``)."""
