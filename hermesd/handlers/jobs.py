"""Job ops, for a job of any kind: ps, job, result, wait, cancel, logs, journal."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hermesd import jobs as jobs_mod
from hermesd import journal as journal_file
from hermesd.billing.ops import BillingPlugin
from hermesd.context import Context
from hermesd.contract.states import LIVE
from hermesd.governor.ops import GovernorPlugin
from hermesd.router import op
from hermesd.protocol import arg, fit

MAX_WAIT_SECONDS = 3600.0
END_WAIT_SECONDS = 60.0
"""How long ``cancel`` (and ``batch.cancel``) waits for a job without a process to end: its job
type writes its files first."""


async def ended(ctx: Context, job_id: str, timeout: float = END_WAIT_SECONDS) -> dict[str, Any]:
    """The row of ``job_id`` once it is terminal, or after ``timeout`` seconds as it is then
    (a huge run still finishing: its ``job.state`` event follows)."""
    try:
        return await asyncio.wait_for(asyncio.shield(ctx.jobs.wait(job_id)), timeout)
    except asyncio.TimeoutError:
        return ctx.jobs.require(job_id)
MAX_PAGE = 1000
"""Most jobs one ``ps`` page holds."""


def public(row: dict[str, Any]) -> dict[str, Any]:
    """The job record of a row, plus ``delegation_id`` for background jobs, and when set
    ``after`` (the jobs it starts after), ``retry_of`` (the job it retries), ``env``
    (the names of the variables it was given; the values may be secrets) and ``worktree`` (its
    git worktree: ``{path, branch, repo, cwd}``, once its child reported what it holds
    ``changed``, ``changes``, ``commits``…, once the daemon settled it ``state``: ``kept`` or
    ``removed``: :mod:`hermesd.worktrees.ops`) and ``mcp`` (the MCP servers it used and how each was as
    it ended: ``{NAME: {transport, state, tools, calls, failures, error}}``, :mod:`hermesd.mcp.ops`)."""
    rec = jobs_mod.record(row)
    if row.get("background"):
        rec["delegation_id"] = row["id"]
    spec = row.get("spec") or {}
    for key in ("after", "retry_of", "timeout_seconds", "worktree", "mcp"):
        if spec.get(key):
            rec[key] = spec[key]
    if spec.get("env"):
        rec["env"] = sorted(spec["env"])
    return rec


def submitted(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    """The reply to a request that submitted ``row``: its record, with ``queue_paused: true``
    while the queue is paused (the job waits ``queued`` until ``resume``)."""
    rec = public(row)
    if ctx.runner.pause.paused and row["status"] == "queued":
        rec["queue_paused"] = True
    return rec


@op("ps")
async def ps(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """List jobs: running and queued, or every job with ``all=true``.

    Optional ``kind``, ``session``, ``prefix`` (ids starting with it), ``order``
    (``oldest``, the default, or ``newest``: first), ``limit`` (at least 1, default
    and most 1000) and ``cursor`` (the ``next`` of the page before).  Returns
    ``{jobs: [record…], more, next}``: ``more`` is true when jobs beyond this
    page exist (also when the page was cut to fit a frame); ask again with
    ``cursor=next`` for them.  A job told to wait by the governor has ``waiting``:
    ``{endpoint, reason, seconds, until, since}`` (the provider's rate limit; ``seconds`` it was
    told, ``until`` and ``since`` epoch seconds: the time left is ``until`` minus now).
    """
    show_all = arg(args, "all", bool, False)
    kind = arg(args, "kind", str, None, choices=tuple(ctx.jobs.kinds))
    newest = arg(args, "order", str, "oldest", choices=("oldest", "newest")) == "newest"
    rows, more = ctx.jobs.page(statuses=None if show_all else LIVE, kind=kind,
                               session=arg(args, "session", str, None), prefix=arg(args, "prefix", str, None),
                               newest_first=newest, after=arg(args, "cursor", int, None),
                               limit=min(arg(args, "limit", int, MAX_PAGE, lo=1), MAX_PAGE))
    governor = ctx.service(GovernorPlugin)
    jobs, complete = fit([governor.annotate(public(row)) for _, row in rows])
    return {"jobs": jobs, "more": more or not complete, "next": rows[len(jobs) - 1][0] if jobs else None}


@op("job")
async def job(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The record of job ``id`` (``not_found`` if none)."""
    return public(ctx.jobs.require(arg(args, "id", str)))


@op("result")
async def result(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The record of job ``id`` with its tool trace, ``waiting`` while the governor holds it (as
``ps`` gives it), and ``tree_usage``: the tokens and cost of the
    job with all its subagents (``{calls, input, output, cache_write, cache_read, tokens, cost_usd,
    cost_unknown}``); ``trajectory=true`` adds the ShareGPT trajectory the child recorded
    (``null`` when it recorded none)."""
    row = ctx.jobs.require(arg(args, "id", str))
    rec = ctx.service(GovernorPlugin).annotate(public(row))
    rec["tree_usage"] = ctx.service(BillingPlugin).spent(("tree", row["id"]))
    if arg(args, "trajectory", bool, False):
        path = ctx.runner.job_dir(row["id"]) / "trajectory.json"
        try:
            rec["trajectory"] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            rec["trajectory"] = None
    return rec


@op("wait")
async def wait(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Block until job ``id`` is terminal or ``timeout`` seconds pass (default 30, max 3600).

    Returns ``{done: bool, job: record}``; clients loop on ``done=false``.
    """
    job_id = arg(args, "id", str)
    timeout = min(float(arg(args, "timeout", (int, float), 30.0, lo=0)), MAX_WAIT_SECONDS)
    fut = ctx.jobs.wait(job_id)
    try:
        row = await asyncio.wait_for(asyncio.shield(fut), timeout)
        return {"done": True, "job": public(row)}
    except asyncio.TimeoutError:
        return {"done": False, "job": public(ctx.jobs.require(job_id))}


@op("cancel")
async def cancel(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Cancel job ``id``: a queued job ends ``cancelled`` at once; a live one is
    interrupted (SIGINT, then SIGTERM and SIGKILL to its process group after
    grace periods) and ends ``cancelled`` with its partial output.  A job
    without a process (a batch) is ended by its job type; the answer waits for
    that (at most 60 s).  ``invalid_state`` for a job already finished."""
    row = ctx.runner.stop(arg(args, "id", str), "cancel")
    if row["status"] not in jobs_mod.TERMINAL and not ctx.jobs.kind(row["kind"]).process:
        row = await ended(ctx, row["id"])
    return public(row)


@op("logs")
async def logs(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Read job ``id``'s log from byte ``offset`` (default 0; negative = from the end;
    past the end: from 0, the log was rotated), at most ``limit`` bytes (default 65536).
    Returns ``{data, offset, size, done}`` where ``offset`` is where to continue and
    ``done`` tells the job is terminal."""
    offset = arg(args, "offset", int, 0)
    limit = min(arg(args, "limit", int, 65536, lo=1), 1 << 20)
    row = ctx.jobs.require(arg(args, "id", str))
    path = ctx.runner.log_path(row["id"])
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            start = max(0, size + offset) if offset < 0 else offset if offset <= size else 0  # past the end: rotated
            fh.seek(start)
            data = fh.read(limit)
    except FileNotFoundError:
        size, start, data = 0, 0, b""
    return {"data": data.decode("utf-8", "replace"), "offset": start + len(data), "size": size,
            "done": row["status"] in jobs_mod.TERMINAL}


@op("journal")
async def journal(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Read job ``id``'s journal (its conversation as the child wrote it, secrets redacted;
    ``hermesd.journal``: entries ``message``, ``tool_started``, ``tool_result``, ``note``) from
    byte ``offset`` (default 0), whole lines of at most about ``limit`` bytes (default and most
    1 MiB; a longer line whole).  Returns ``{entries, offset, size, done}``: ``offset`` is where to
    continue, ``done`` tells the job is terminal; a job that keeps no journal has no entries."""
    row = ctx.jobs.require(arg(args, "id", str))
    limit = min(arg(args, "limit", int, 1 << 20, lo=1), 1 << 20)
    entries, offset, size = journal_file.read_from(ctx.runner.job_dir(row["id"]) / journal_file.NAME,
                                                   arg(args, "offset", int, 0, lo=0), limit)
    return {"entries": entries, "offset": offset, "size": size, "done": row["status"] in jobs_mod.TERMINAL}
