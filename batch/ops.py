"""Batch ops: ``batch.run``, ``batch.status``, ``batch.cancel``, ``batch.list``,
``batch.distributions``, the child op ``child.batch_sync`` (a batch's Ray
driver), and the hooks that keep batches going over restarts.

The job type's insides live in ``batch/`` (``batch.service.BatchService``, the
plugin's service); this module declares the plugin, validates arguments and maps them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batch import distributions
from batch.settings import Settings, flag_options, job_id_of, resume_args
from batch.spec import DriverSpec, ItemSpec
from hermesd import config as config_mod, idempotency
from hermesd.context import Context
from batch.config import EXECUTORS
from hermesd.contract.states import LIVE
from hermesd.contract.wire import JobResult
from hermesd.subagents import SubagentRules
from hermesd.governor.ops import child_grant, child_grant_done
from hermesd.handlers.children import child_progress
from hermesd.handlers.jobs import ended
from hermesd.jobs import JobKind
from hermesd.router import op
from hermesd.protocol import ProtocolError, arg

if TYPE_CHECKING:
    from batch.service import BatchService

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
"""A run name: letters, digits, ``.``, ``_``, ``-``; at most 100 characters (it names a directory)."""


class BatchPlugin(SubagentRules):
    """Batch runs.  A ``batch`` job has no process: it goes ``queued → running`` and
    ends when its run has written its files; found running at a restart it
    resumes from them.  Its prompts run as ``batch_item`` children in the pool
    ``batch:<job id>``; a queued item waits over a restart for its batch to re-own it.
    With ``executor: ray`` a ``batch_driver`` child (one per batch) carries them to a
    Ray cluster instead (``batch.executor_ray``), each item a ``ray_item`` job without a
    process here (``queued`` until it is up on a worker, then ``running``; its reports
    come through the driver, so the stale rule, ``ps``, ``top`` and the bill see it as a
    local item); a driver dies with its daemon (its tasks end with it, its items are
    ``lost``) and the resumed batch starts a new one."""

    events = {
        "batch.progress": "Progress of a batch run: `total`, `done`, `discarded`, `failed`, `running`, `pending`, "
        "`processed`, `rate_per_minute`, `eta_seconds`; after a prompt settled, `item`: `index`, `job`, `outcome` "
        "(`written`, `discarded`, `failed`), `detail`, `toolsets`.",
        "batch.restarting": "A batch that was running when the daemon stopped is queued to resume. "
        "`data.previous`: its state then.",
        "batch.budget_stop": "A budget of the batch run is spent: no more prompts start, the running ones finish, "
        "and the run ends `failed` with `budget_exceeded` (`hermes-batch` exits 13). Not fsynced one by one. "
        "`data`: `error` (the budget, what was spent, the limit), `pending` (prompts not started).",
    }

    kinds = (JobKind("batch", "batch", process=False, at_restart="resume", budget="run"),
             JobKind("batch_item", "item", entry="child.agent:run_item", spec=ItemSpec),
             JobKind("batch_driver", "raydrv", process=True, at_restart="lost", entry="child.ray_driver:run",
                     spec=DriverSpec),
             JobKind("ray_item", "rayitem", process=False, at_restart="lost", entry="child.agent:run_item",
                     spec=ItemSpec))
    on_demand = ("batch.service",)

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self._service: BatchService | None = None
        ctx.provide(self)

    @property
    def service(self) -> "BatchService":
        """The service of every run, made at its first use: until a batch runs, the daemon
        holds none of ``batch``'s insides (half a MiB of an idle daemon: bench/README.md)."""
        if self._service is None:
            from batch.service import BatchService

            self._service = BatchService(self.ctx)
        return self._service

    def on_result(self, row: dict[str, Any], result: JobResult) -> None:
        """An item reported: its run records the prompt."""
        self.service.executor.on_result(row, result)

    def on_exit(self, row: dict[str, Any]) -> None:
        """An item ended and was reaped: its run gets the worker back; a Ray driver
        ended: it is started again, or its batch given up (each executor knows its own jobs)."""
        self.service.executor.on_exit(row)
        self.service.ray.on_exit(row)

    def stop(self, row: dict[str, Any], reason: str) -> None:
        """The generic ``cancel`` of a batch job; the stop of an item on Ray (``cancel``, or the
        runner's stale rule): its driver cancels its task."""
        if row["kind"] == "ray_item":
            self.service.ray.stop_item(row, reason)
        else:
            self.service.stop(row, reason)

    def restore(self) -> None:
        """Batches found running continue from their files (and their leftover items end)."""
        if self.ctx.jobs.list(statuses=LIVE, kinds=tuple(kind.name for kind in self.kinds), limit=1):
            self.service.restore()

    def shutdown(self) -> None:
        """Each live run saves its checkpoint."""
        if self._service is not None:
            self._service.shutdown()


def _service(ctx: Context) -> "BatchService":
    return ctx.service(BatchPlugin).service


def _absolute(args: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = arg(args, name, str, default)
    if value is not None and not os.path.isabs(value):
        raise ProtocolError("bad_request", f"argument '{name}' must be an absolute path, not {value!r}", {"field": name})
    return value


MAX_COUNT = 10_000_000
"""Largest batch_size, num_workers, max_turns or max_samples accepted."""


def _positive(args: dict[str, Any], name: str, default: int | None = None) -> int | None:
    return arg(args, name, int, default, lo=1, hi=MAX_COUNT)


def settings_from(ctx: Context, args: dict[str, Any]) -> Settings:
    """Validate ``batch.run`` arguments into :class:`batch.settings.Settings`; with ``resume``,
    the run's fixed settings the request leaves out are taken from its checkpoint
    (:func:`batch.settings.resume_args`).

    Raises ``ProtocolError(bad_request)`` naming the field: a run name that is
    not a plain file name, relative paths, numbers below 1, an unknown
    distribution or reasoning effort.
    """
    run_name = arg(args, "run_name", str)
    if not RUN_NAME.match(run_name):
        raise ProtocolError("bad_request", f"run_name {run_name!r} must be 1 to 100 letters, digits, '.', '_' or '-' "
                            "(it names the run's directory)", {"field": "run_name"})
    output_dir = _absolute(args, "output_dir") or os.path.join(ctx.config.state_dir(), ctx.config.batch.output_dir)
    if arg(args, "resume", bool, False):  # what the request leaves out of the run's fixed settings: the run's own
        args = resume_args(args, run_name, Path(output_dir) / run_name)
    distribution = arg(args, "distribution", str, distributions.DEFAULT)
    own = args.get("distribution_toolsets") or ctx.config.batch.distributions.get(distribution)  # the run's, the config's
    if own is not None and (distributions.parse({"run": own})[1] or distribution in distributions.DISTRIBUTIONS):
        raise ProtocolError("bad_request", f"distribution_toolsets {own!r} is no distribution of the run's own",
                            {"field": "distribution_toolsets"})
    try:
        distributions.get(distribution, own)
    except distributions.UnknownDistribution as exc:
        mine = f"; the config's: {', '.join(ctx.config.batch.distributions)}" if ctx.config.batch.distributions else ""
        raise ProtocolError("bad_request", f"{exc}{mine}", {"field": "distribution"}) from None
    return Settings(run_name=run_name, dataset_file=_absolute(args, "dataset_file"), output_dir=output_dir,
                    batch_size=_positive(args, "batch_size"),
                    num_workers=_positive(args, "num_workers", ctx.config.batch.num_workers),
                    max_turns=_positive(args, "max_turns", ctx.config.batch.max_turns), distribution=distribution,
                    distribution_toolsets=own,
                    reasoning_effort=arg(args, "reasoning_effort", str, None, choices=config_mod.REASONING_EFFORTS),
                    max_samples=_positive(args, "max_samples"), model=arg(args, "model", str, None),
                    executor=arg(args, "executor", str, ctx.config.batch.executor, choices=EXECUTORS),
                    ray_address=(arg(args, "ray_address", str, ctx.config.batch.ray_address) or "").strip() or None,
                    ray_num_cpus=_not_negative(args, "ray_num_cpus", ctx.config.batch.ray_num_cpus),
                    ray_memory_mb=_positive(args, "ray_memory_mb", ctx.config.batch.ray_memory_mb),
                    **flag_options(args))


def _not_negative(args: dict[str, Any], name: str, default: float) -> float:
    value = float(arg(args, name, (int, float), default))
    if value < 0:
        raise ProtocolError("bad_request", f"argument '{name}' must be >= 0, not {value:g}", {"field": name})
    return value


@op("batch.run", work=True)
async def batch_run(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Start batch run ``run_name`` over ``dataset_file`` (absolute JSONL path), or
    continue it with ``resume=true`` (then ``dataset_file``, ``batch_size`` and
    ``distribution`` default to the run's own, from its ``checkpoint.json``).

    Arguments: ``batch_size`` (required to start, prompts per ``batch_N.jsonl``),
    ``num_workers`` (default ``batch.num_workers``, 4), ``max_turns`` (default
    ``batch.max_turns``, 10), ``distribution`` (default ``default``; see
    ``batch.distributions``), ``reasoning_effort``, ``max_samples`` (use only
    the first K usable prompts), ``model``, ``output_dir`` (absolute; default
    ``batch.output_dir`` under ``HERMES_HOME``); batch_runner's
    ``ephemeral_system_prompt``, ``prefill_messages_file`` (absolute; a JSON list
    of ``{role, content}``, refused as ``FILE: reason``), ``max_tokens``,
    ``reasoning_disabled``, ``provider``, ``base_url``; and ``allow_synthetic``,
    ``exclude_partial`` (see ``batch.settings``); ``verifier`` (a shell command run in
    each item's working directory after its agent ends: exit status 0 passes, or it
    prints ``{"reward": float}``; see ``batch.verify``), ``verifier_timeout`` (seconds,
    default 60), ``min_reward`` (samples below it stay out of ``trajectories.jsonl``; ``"none"``: no such
    filter — on a resume, as ``allow_synthetic``/``exclude_partial`` ``false``, it drops the run's own),
    ``samples_per_prompt`` (K attempts of each prompt, default 1: ``batch.groups``); ``executor`` (``local`` or
    ``ray``; default ``batch.executor``) and, for ``ray``, ``ray_address``
    (default ``batch.ray_address``, else the daemon's ``RAY_ADDRESS``, else
    ``auto``), ``ray_num_cpus`` and ``ray_memory_mb`` (what each item reserves).
    With ``ray`` the answer waits until the run's driver has joined the cluster.
    The run writes
    ``OUTPUT_DIR/RUN_NAME/``.  Returns the batch record (see ``batch.status``) with
    ``warnings``, texts for the user: a resume whose ``allow_synthetic``/``exclude_partial``/
    ``min_reward`` differ from the run's names them and how many written samples
    ``trajectories.jsonl`` kept and will keep (it is written again from the batch files).
    A line's ``docker_image`` runs that prompt's terminal commands in a
    container of that image.  Errors: ``bad_request`` (a bad argument, an
    unreadable dataset, a ``docker_image`` line that cannot run — a bad image
    name, no container engine installed —, a resume whose
    batch_size/dataset/distribution/samples_per_prompt differ, a resume over a
    dataset changed in place since the run began — naming its first changed line — unless
    ``allow_changed_dataset=true``, a bad prefill file, ``resume`` of a
    run that does not exist; field ``executor``: Ray not installed, the cluster
    unreachable; field ``ray_num_cpus`` or ``ray_memory_mb``: no node of the cluster can
    hold one item), ``invalid_state`` (already running; the directory holds a run
    and ``resume`` is off).  ``idempotency_key``: a repeat of a request with the same key
    gets the run the first one started (its record, with ``repeat: true``), while that job is kept;
    the key with other arguments is ``bad_request``.
    """
    key = idempotency.key_of(args, "batch.run")
    first = idempotency.earlier(ctx.store, key)
    if first is not None:
        return idempotency.repeat(_service(ctx).record(first["id"]))
    settings = settings_from(ctx, args)
    service, job_id = _service(ctx), job_id_of(settings.run_name)
    if settings.executor == "ray" and job_id not in service.runs:
        await service.ray.connect(job_id, settings)
    try:
        return service.run(settings, resume=arg(args, "resume", bool, False),
                           allow_changed=arg(args, "allow_changed_dataset", bool, False), idempotency_key=key)
    finally:
        service.ray.discard(job_id)  # a driver started for a run that did not start


@op("batch.status")
async def batch_status(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The record of batch ``id`` (job id or run name): the job record plus
    ``run_name, run_dir, settings, files, seq``, ``executor {name}`` (with
    ``ray``: ``address, nodes, cpus, cpus_free, fits, shapes, driver, driver_starts,
    in_flight, waiting``: ``fits`` false and ``waiting`` saying why while no node can hold an
    item), ``progress {total, done,
    discarded, failed, running, pending, processed, rate_per_minute,
    eta_seconds, rewards}`` (``rewards``: ``{verified, rewarded, mean, passed,
    pass_rate, verifier_errors}`` once a verifier judged a sample, else None),
    ``bad_lines`` and ``errors`` (``FILE:LINE: reason``), and ``failures``: the commonest
    errors of the prompts that failed, ``[{error, count}]``, commonest first (at most 3)."""
    service = _service(ctx)
    return service.record(service.find(arg(args, "id", str))["id"])


@op("batch.cancel")
async def batch_cancel(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Cancel batch ``id`` (job id or run name): its running items are interrupted,
    ``trajectories.jsonl`` and ``statistics.json`` are written for what is done,
    and the job ends ``cancelled`` (``--resume`` continues it).  Answers once the
    job has ended (or after 60 s) with its record.  ``invalid_state`` when it is
    not running."""
    service = _service(ctx)
    job_id = service.cancel(arg(args, "id", str))
    await ended(ctx, job_id)
    return service.record(job_id)


@op("batch.list")
async def batch_list(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Every batch job: ``{batches: [record…]}`` (see ``batch.status``)."""
    return {"batches": _service(ctx).list()}


@op("batch.distributions")
async def batch_distributions(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The toolset distributions: ``{default, distributions: {name: {description,
    toolsets: {toolset: probability}}}}``."""
    return {"default": distributions.DEFAULT, "distributions": distributions.listing()}


@op("child.batch_sync", child=True)
async def child_batch_sync(ctx: Context, job: str, args: dict[str, Any]) -> dict[str, Any]:
    """From a batch's Ray driver (a ``batch_driver`` child): ``outcomes`` (items that
    ended: ``handle, index, status, result, error, started_at, completed_at`` (seconds
    since the epoch), ``node``), ``cluster`` (``address, nodes, cpus, cpus_free, fits,
    shapes``, or None), ``running`` (tasks in flight).  Each live attempt's outcome is recorded
    once; repeated or stale ones are dropped.  Answers ``{run: [{handle, index,
    spec}], cancel: [handle], stop}``: items to start, tasks to cancel, whether to end.
    A sync is the driver's sign of life (it is never interrupted as stale while it syncs)."""
    ctx.runner.activity.seen(job)
    return _service(ctx).ray.on_sync(job, args)


@op("child.batch_relay", child=True)
async def child_batch_relay(ctx: Context, job: str, args: dict[str, Any]) -> Any:
    """From a batch's Ray driver: a report or request of one of its items on the cluster,
    relayed.  Args: ``item`` (the item's job id, an item this driver was handed), ``op``
    (``child.progress``, ``child.grant`` or ``child.grant_done``: nothing else an item may
    ask) and ``args`` (that op's arguments).  Answered as that op is for a local child, the
    item being the job: its grants pass through the governor and the bill, its progress is
    its activity (the stale rule) and its counters.  The item's first relayed message makes
    it ``running``.  Raises ``not_found`` for an item not of this driver (ended, or another
    driver's), ``bad_request`` for another op."""
    item = arg(args, "item", str)
    name = arg(args, "op", str, choices=tuple(RELAYED))
    inner = arg(args, "args", dict, {})
    _service(ctx).ray.relayed(job, item)
    return await RELAYED[name](ctx, item, inner)


RELAYED = {"child.progress": child_progress, "child.grant": child_grant, "child.grant_done": child_grant_done}
"""The child ops an item on Ray may send through its driver (``child.batch_relay``)."""
