"""Job ops: delegate, spawn_parallel, ps, job, result, wait, cancel, logs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hermesd import jobs as jobs_mod
from hermesd.handlers import op
from hermesd.protocol import ProtocolError, arg, fit
from hermesd.tasks import new_group, task_fields

MAX_WAIT_SECONDS = 3600.0


def public(row: dict[str, Any]) -> dict[str, Any]:
    """The job record of a row, plus ``delegation_id`` for background jobs."""
    rec = jobs_mod.record(row)
    if row.get("background"):
        rec["delegation_id"] = row["id"]
    return rec


@op("delegate", work=True)
async def delegate(d, args: dict[str, Any]) -> dict[str, Any]:
    """Start one subagent for ``goal`` (see ``task_fields`` for the arguments).

    ``background=true``: a background delegation, admitted under
    ``delegation.max_async_children`` — beyond it ``capacity_reached`` (never
    silently queued) unless ``queue=true``.  Returns the job record; for a
    background job ``status`` is its state and ``delegation_id`` its id.
    """
    background = arg(args, "background", bool, False)
    queue = arg(args, "queue", bool, False)
    fields = task_fields(d, args)
    kind = "background" if background else "delegation"
    row = d.runner.submit(kind, background=background, queue=queue, **fields)
    return public(row)


@op("spawn_parallel", work=True)
async def spawn_parallel(d, args: dict[str, Any]) -> dict[str, Any]:
    """Start a foreground group of subagents from ``tasks`` (a list of task maps).

    At most ``delegation.max_concurrent_children`` of the group run at once;
    the rest wait their turn.  Returns ``{group, jobs: [record…]}`` in task order.
    """
    tasks = arg(args, "tasks", list)
    limit = d.config.delegation.max_tasks_per_call
    if not tasks or len(tasks) > limit:
        raise ProtocolError("bad_request", f"'tasks' must hold 1 to {limit} tasks (delegation.max_tasks_per_call)",
                            {"field": "tasks"})
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise ProtocolError("bad_request", f"tasks[{i}] must be a map", {"field": f"tasks[{i}]"})
    fields = [task_fields(d, {**{k: v for k, v in args.items() if k != "tasks"}, **t}) for t in tasks]
    group = new_group()
    rows = [d.runner.submit("delegation", pools=(group,), parent=group, **f) for f in fields]
    return {"group": group, "jobs": [public(r) for r in rows]}



@op("ps")
async def ps(d, args: dict[str, Any]) -> dict[str, Any]:
    """List jobs: running and queued, or every job with ``all=true``.

    Optional ``kind``, ``session`` and ``limit`` (default 1000).  Returns ``{jobs: [record…], more}``,
    oldest first; ``more``: the list was cut to fit a frame.
    """
    show_all = arg(args, "all", bool, False)
    kind = arg(args, "kind", str, None, choices=jobs_mod.KINDS)
    rows = d.jobs.list(statuses=None if show_all else ("queued", "starting", "running"),
                       kinds=(kind,) if kind else None, session=arg(args, "session", str, None),
                       limit=arg(args, "limit", int, 1000))
    jobs, complete = fit([public(r) for r in rows])
    return {"jobs": jobs, "more": not complete}


@op("job")
async def job(d, args: dict[str, Any]) -> dict[str, Any]:
    """The record of job ``id`` (``not_found`` if none)."""
    return public(d.jobs.require(arg(args, "id", str)))


@op("result")
async def result(d, args: dict[str, Any]) -> dict[str, Any]:
    """The record of job ``id`` with its tool trace; ``trajectory=true`` adds the
    ShareGPT trajectory the child recorded (``null`` when it recorded none)."""
    row = d.jobs.require(arg(args, "id", str))
    rec = public(row)
    if arg(args, "trajectory", bool, False):
        path = d.runner.job_dir(row["id"]) / "trajectory.json"
        try:
            rec["trajectory"] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            rec["trajectory"] = None
    return rec


@op("wait")
async def wait(d, args: dict[str, Any]) -> dict[str, Any]:
    """Block until job ``id`` is terminal or ``timeout`` seconds pass (default 30, max 3600).

    Returns ``{done: bool, job: record}``; clients loop on ``done=false``.
    """
    job_id = arg(args, "id", str)
    timeout = min(float(arg(args, "timeout", (int, float), 30.0)), MAX_WAIT_SECONDS)
    fut = d.jobs.wait(job_id)
    try:
        row = await asyncio.wait_for(asyncio.shield(fut), timeout)
        return {"done": True, "job": public(row)}
    except asyncio.TimeoutError:
        return {"done": False, "job": public(d.jobs.require(job_id))}


@op("cancel")
async def cancel(d, args: dict[str, Any]) -> dict[str, Any]:
    """Cancel job ``id``: a queued job ends ``cancelled`` at once; a live one is
    interrupted (SIGINT, then SIGTERM and SIGKILL to its process group after
    grace periods) and ends ``cancelled`` with its partial output.
    ``invalid_state`` for a job already finished."""
    row = d.runner.stop(arg(args, "id", str), "cancel")
    return public(row)


@op("logs")
async def logs(d, args: dict[str, Any]) -> dict[str, Any]:
    """Read job ``id``'s log from byte ``offset`` (default 0; negative = from the end),
    at most ``limit`` bytes (default 65536).  Returns ``{data, offset, size, done}``
    where ``offset`` is where to continue and ``done`` tells the job is terminal."""
    row = d.jobs.require(arg(args, "id", str))
    offset = arg(args, "offset", int, 0)
    limit = max(1, min(arg(args, "limit", int, 65536), 1 << 20))
    path = d.runner.log_path(row["id"])
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            fh.seek(start)
            data = fh.read(limit)
    except FileNotFoundError:
        size, start, data = 0, 0, b""
    return {"data": data.decode("utf-8", "replace"), "offset": start + len(data), "size": size,
            "done": row["status"] in jobs_mod.TERMINAL}
