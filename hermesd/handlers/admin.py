"""Daemon-wide ops: hello, status, events_since, reload, shutdown."""

from __future__ import annotations

import os
from typing import Any

from hermesd import __version__, protocol
from hermesd.context import Context
from hermesd.governor.ops import GovernorPlugin
from hermesd.router import op
from hermesd.protocol import arg

CAPABILITIES = ["delegate", "background", "queue", "events", "cancel", "logs"]


@op("hello")
async def hello(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Identify the daemon.

    Returns ``{version, protocol, pid, uptime_seconds, capabilities, ops}``.
    """
    return {"version": __version__, "protocol": protocol.PROTOCOL_VERSION, "pid": os.getpid(),
            "uptime_seconds": ctx.control.uptime(), "capabilities": CAPABILITIES, "ops": sorted(ctx.router.ops)}


@op("status")
async def status(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Daemon state: pid, uptime, caps and how full they are, job counts by state, last event seq,
    and how children start (``start``: ``{method}``, with ``zygote``, ``spares`` and
    ``starts: {warm, cold}`` (since the daemon started) for ``forkserver``; ``zygote`` is null
    until it is warm; ``cold_reason`` says why children start cold when the zygote could not
    start); ``loop_lag`` when the daemon runs with
    ``HERMES_LOOP_LAG_MS`` (:mod:`hermesd.looplag`); the queue (``queue``: ``paused``, ``paused_at``,
    ``waiting_for_jobs`` that wait for others), whether ``hooks.on_job_end`` is set, and the
    governor (``governor``: per provider endpoint and key, ``in_flight``, ``concurrency``,
    ``paused_seconds``, ``paused_until`` (epoch seconds) and ``reason`` while paused or a job
    waits for it (the longest wait), ``calls`` by outcome, ``configured``
    limits, ``remaining``: what the provider's headers said is left of each dimension, ``waiting`` jobs), and the bill (``spend``: ``today``'s calls, tokens and cost,
    UTC, and the daily limits ``daily_cost_usd``, ``daily_tokens``).  Only reads."""
    ctx.events.flush()  # buffered progress events count in last_seq
    counts, last_seq, added = ctx.store.memo("status", lambda: (
        {row["status"]: row["n"] for row in ctx.store.all("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")},
        ctx.events.last_seq(), ctx.plugins.status()))
    out = {"version": __version__, "pid": os.getpid(), "uptime_seconds": ctx.control.uptime(),
           "started_at": ctx.control.started_at, "stopping": ctx.stopping, "runtime_dir": str(ctx.control.sockets.dir),
           "state_db": str(ctx.store.path), "config": ctx.config.source, "children": len(ctx.procs.children),
           "queued": len(ctx.scheduler.queue), "caps": ctx.scheduler.usage(), "jobs": dict(counts),
           "last_seq": last_seq, **{key: value for part in added for key, value in part.items()},
           "start": ctx.procs.spawner.describe(), "queue": ctx.runner.queue_state(),
           "governor": ctx.service(GovernorPlugin).describe()}
    if ctx.control.loop_lag is not None:
        out["loop_lag"] = ctx.control.loop_lag.describe()
    return out


@op("events_since")
async def events_since(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Committed events after ``since`` (seq, default 0), oldest first, at most ``limit``
    (at least 1, default 1000, more than 10000 served as 10000).

    Optional ``types`` (list of event types) filters.  ``order: newest`` pages
    backwards instead: the events before ``before`` (a seq; default: the
    newest), newest first.  Returns ``{events, last_seq, oldest_seq, more,
    gap}``: ``more`` is true when events beyond this page exist (ask again
    from its last seq); ``gap`` is ``{since, oldest_seq}`` when retention
    removed events after ``since`` — they are gone, the page starts at
    ``oldest_seq`` — and null otherwise, so a client is never handed a silent
    gap.  A client that reconnects subscribes first, then fetches this
    backlog, then de-duplicates by seq, and so loses nothing that is kept.
    """
    since = arg(args, "since", int, 0, lo=0)
    before = arg(args, "before", int, None, lo=0)
    limit = min(arg(args, "limit", int, 1000, lo=1), 10000)  # more is served as 10000 (older clients ask so)
    newest = arg(args, "order", str, "oldest", choices=("oldest", "newest")) == "newest"
    types = arg(args, "types", list, None)
    if types is not None and not all(isinstance(t, str) for t in types):
        raise protocol.ProtocolError("bad_request", "argument 'types' must be a list of strings", {"field": "types"})
    page = ctx.events.since(before if newest else since, limit + 1, types, newest_first=newest)
    events, complete = protocol.fit(page[:limit])
    return {"events": events, "last_seq": ctx.events.last_seq(), "oldest_seq": ctx.events.oldest_seq(),
            "more": len(page) > limit or not complete, "gap": None if newest else ctx.events.gap(since)}


@op("reload")
async def reload(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Re-read the config file (as SIGHUP does).  An invalid file is refused
    (``invalid_config`` naming file, line and key) and the running config kept.
    Returns ``{reloaded, source, restart_needed}``: ``restart_needed`` lists the
    changed keys that take effect only at the next start (``supervisor.state_dir``,
    ``log_dir``, ``start_method``)."""
    return ctx.control.reload()


@op("shutdown")
async def shutdown(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Stop gracefully (as SIGTERM does): refuse new work, interrupt every child,
    persist final states and notifications, remove the sockets, exit 0."""
    ctx.loop.call_soon(ctx.control.request_shutdown, "shutdown request")
    return {"stopping": True, "pid": os.getpid()}
