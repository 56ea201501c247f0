"""Batch ops: ``batch.run``, ``batch.status``, ``batch.cancel``, ``batch.list``,
``batch.distributions`` (SPEC §6), and the hooks that keep batches going over restarts.

The job type itself lives in ``batch/`` (``batch.service.BatchService`` is
``daemon.services["batch"]``); this module validates arguments and maps them.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from batch import distributions
from batch.service import BatchService
from batch.settings import Settings
from hermesd import config as config_mod
from hermesd.handlers import op, restore_hooks, setup_hooks, shutdown_hooks
from hermesd.protocol import ProtocolError, arg

CANCEL_WAIT_SECONDS = 60.0
"""How long ``batch.cancel`` waits for the run's files to be written before it answers."""

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
"""A run name: letters, digits, ``.``, ``_``, ``-``; at most 100 characters (it names a directory)."""


def _service(d) -> BatchService:
    return d.services["batch"]


def _absolute(args: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = arg(args, name, str, default)
    if value is not None and not os.path.isabs(value):
        raise ProtocolError("bad_request", f"argument '{name}' must be an absolute path, not {value!r}", {"field": name})
    return value


def _positive(args: dict[str, Any], name: str, default: int | None = None) -> int | None:
    value = arg(args, name, int, default)
    if value is not None and value < 1:
        raise ProtocolError("bad_request", f"argument '{name}' must be >= 1, not {value}", {"field": name})
    return value


def settings_from(d, args: dict[str, Any]) -> Settings:
    """Validate ``batch.run`` arguments into :class:`batch.settings.Settings`.

    Raises ``ProtocolError(bad_request)`` naming the field: a run name that is
    not a plain file name, relative paths, numbers below 1, an unknown
    distribution or reasoning effort.
    """
    run_name = arg(args, "run_name", str)
    if not RUN_NAME.match(run_name):
        raise ProtocolError("bad_request", f"run_name {run_name!r} must be 1 to 100 letters, digits, '.', '_' or '-' "
                            "(it names the run's directory)", {"field": "run_name"})
    distribution = arg(args, "distribution", str, distributions.DEFAULT)
    try:
        distributions.get(distribution)
    except distributions.UnknownDistribution as exc:
        raise ProtocolError("bad_request", str(exc), {"field": "distribution"}) from None
    output_dir = _absolute(args, "output_dir") or os.path.join(d.config.state_dir(), d.config.batch.output_dir)
    return Settings(run_name=run_name, dataset_file=_absolute(args, "dataset_file"), output_dir=output_dir,
                    batch_size=_positive(args, "batch_size"),
                    num_workers=_positive(args, "num_workers", d.config.batch.num_workers),
                    max_turns=_positive(args, "max_turns", d.config.batch.max_turns), distribution=distribution,
                    reasoning_effort=arg(args, "reasoning_effort", str, None, choices=config_mod.REASONING_EFFORTS),
                    max_samples=_positive(args, "max_samples"), model=arg(args, "model", str, None))


@op("batch.run", work=True)
async def batch_run(d, args: dict[str, Any]) -> dict[str, Any]:
    """Start batch run ``run_name`` over ``dataset_file`` (absolute JSONL path), or
    continue it with ``resume=true``.

    Arguments: ``batch_size`` (required, prompts per ``batch_N.jsonl``),
    ``num_workers`` (default ``batch.num_workers``, 4), ``max_turns`` (default
    ``batch.max_turns``, 10), ``distribution`` (default ``default``; see
    ``batch.distributions``), ``reasoning_effort``, ``max_samples`` (use only
    the first K usable prompts), ``model``, ``output_dir`` (absolute; default
    ``batch.output_dir`` under ``HERMES_HOME``).  The run writes
    ``OUTPUT_DIR/RUN_NAME/``.  Returns the batch record (see ``batch.status``).
    Errors: ``bad_request`` (a bad argument, an unreadable dataset, a
    ``docker_image`` line, a resume whose batch_size/dataset/distribution
    differ), ``invalid_state`` (already running; the directory holds a run and
    ``resume`` is off).
    """
    settings = settings_from(d, args)
    return _service(d).run(settings, resume=arg(args, "resume", bool, False))


@op("batch.status")
async def batch_status(d, args: dict[str, Any]) -> dict[str, Any]:
    """The record of batch ``id`` (job id or run name): the job record plus
    ``run_name, run_dir, settings, files, seq``, ``progress {total, done,
    discarded, failed, running, pending, processed, rate_per_minute,
    eta_seconds}``, ``bad_lines`` and ``errors`` (``FILE:LINE: reason``)."""
    service = _service(d)
    return service.record(service.find(arg(args, "id", str))["id"])


@op("batch.cancel")
async def batch_cancel(d, args: dict[str, Any]) -> dict[str, Any]:
    """Cancel batch ``id`` (job id or run name): its running items are interrupted,
    ``trajectories.jsonl`` and ``statistics.json`` are written for what is done,
    and the job ends ``cancelled`` (``--resume`` continues it).  Answers once the
    job has ended (or after 60 s) with its record.  ``invalid_state`` when it is
    not running."""
    service = _service(d)
    job_id = service.cancel(arg(args, "id", str))
    try:
        await asyncio.wait_for(asyncio.shield(d.jobs.wait(job_id)), CANCEL_WAIT_SECONDS)
    except asyncio.TimeoutError:
        pass  # a huge run still merging: the record says running, and the event follows
    return service.record(job_id)


@op("batch.list")
async def batch_list(d, args: dict[str, Any]) -> dict[str, Any]:
    """Every batch job: ``{batches: [record…]}`` (see ``batch.status``)."""
    return {"batches": _service(d).list()}


@op("batch.distributions")
async def batch_distributions(d, args: dict[str, Any]) -> dict[str, Any]:
    """The toolset distributions: ``{default, distributions: {name: {description,
    toolsets: {toolset: probability}}}}``."""
    return {"default": distributions.DEFAULT, "distributions": distributions.listing()}


def _setup(d) -> None:
    d.services["batch"] = BatchService(d)
    d.resumable_kinds.add("batch")


setup_hooks.append(_setup)
restore_hooks.append(lambda d: _service(d).restore())
shutdown_hooks.append(lambda d: _service(d).shutdown())
