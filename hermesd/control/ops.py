"""Operator controls of the queue: ``pause`` and ``resume``; and the job-end hook.

``pause`` stops new starts (running jobs go on; new requests are accepted and
wait ``queued``, their reply says ``queue_paused: true``); ``resume`` starts
what fits.  Both are durable (:mod:`hermesd.control.pause`) and shown by ``status``.
``hooks.on_job_end`` runs for every job that ends (:mod:`hermesd.control.hooks`).
``retry`` is a delegation op (:mod:`hermesd.delegation.ops`).
"""

from __future__ import annotations

import os
from typing import Any

from hermesd.context import Context
from hermesd.control.hooks import JobEndHooks
from hermesd.plugin import Plugin
from hermesd.system.procs import child_env
from hermesd.router import op


class ControlPlugin(Plugin):
    """Operator controls that own no job kind: the job-end hook of every job."""

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.hooks = ctx.provide(JobEndHooks(lambda: ctx.config, ctx.jobs.get, ctx.runner.job_dir,
                                             child_env(dict(os.environ), {}), ctx.procs.watch))

    def on_event(self, event: dict[str, Any]) -> None:
        """A job that ended runs ``hooks.on_job_end``."""
        self.hooks.on_event(event)

    def shutdown(self) -> None:
        """Hooks still running are killed."""
        self.hooks.shutdown()


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
