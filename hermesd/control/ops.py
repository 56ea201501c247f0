"""Operator controls of the queue: ``pause`` and ``resume``; and the job-end hook.

``pause`` stops new starts (running jobs go on; new requests are accepted and
wait ``queued``, their reply says ``queue_paused: true``); ``resume`` starts
what fits.  Both are durable (:mod:`hermesd.control.pause`) and shown by ``status``.
``hooks.on_job_end`` runs for every job that ends (:mod:`hermesd.control.hooks`).
``retry`` is a delegation op (:mod:`hermesd.delegation.ops`).
"""

from __future__ import annotations

from typing import Any

from hermesd.context import Context
from hermesd.control.hooks import JobEndHooks
from hermesd.router import op


class ControlPlugin(JobEndHooks):
    """Operator controls that own no job kind: this module's ops, and the job-end hook of
    every job (its hooks are :class:`hermesd.control.hooks.JobEndHooks`')."""


@op("pause")
async def pause(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Pause the queue: no queued job starts (running ones go on; new requests wait ``queued``).
    Durable across a restart.  Returns the queue state (``paused``, ``paused_at``, ``waiting_for_jobs``)."""
    ctx.runner.pause.pause()
    return ctx.runner.queue_state()


@op("resume")
async def resume(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Resume the queue: queued jobs start as their caps allow.  Returns the queue state."""
    if ctx.runner.pause.resume():
        ctx.runner.pump()
    return ctx.runner.queue_state()
