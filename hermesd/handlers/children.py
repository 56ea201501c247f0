"""Ops of child processes on ``children.sock`` (token already checked)."""

from __future__ import annotations

import json
import os
from typing import Any

from hermesd.billing import ops as billing
from hermesd.context import Context
from hermesd.contract.wire import JobResult
from hermesd.router import op
from hermesd.protocol import arg


@op("child.hello", child=True)
async def child_hello(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """The child is up: the job goes ``running``; returns the job spec."""
    return ctx.runner.on_hello(job, arg(args, "pid", int, None))


@op("child.progress", child=True)
async def child_progress(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Progress of a turn: ``turn``, ``tool``, ``api_calls``, ``tokens {input, output}``, ``text``, and
    what the child is doing now: ``activity`` (e.g. "waiting for the model's first reply",
    "in tool terminal running `pytest -x`"), ``provider``, ``model`` (the daemon names them
    when the job times out or its process dies)."""
    billing.observe(ctx, job, args)  # first: the job.progress event carries the cost it recorded
    ctx.runner.on_progress(job, args)
    return {}


def _save_trajectory(ctx: Context, job: str, trajectory: Any) -> None:
    path = ctx.runner.job_dir(job) / "trajectory.json"
    tmp = path.with_suffix(".tmp")
    text = json.dumps(trajectory, ensure_ascii=False)  # json.dump would stream through the pure-Python encoder
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@op("child.result", child=True)
async def child_result(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """The final result: the fields of `hermesd.contract.wire.JobResult` (see "Job result" below)."""
    result = JobResult.from_wire(args)
    if result.trajectory is not None:
        try:
            _save_trajectory(ctx, job, result.trajectory)
        except OSError:
            pass  # the job's result still counts; the trajectory file is a convenience
    billing.observe(ctx, job, {"tokens": result.tokens, "api_calls": result.api_calls, "provider": result.provider,
                               "model": result.model}, final=True)
    ctx.runner.on_result(job, result)
    return {}
