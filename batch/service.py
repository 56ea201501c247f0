"""The batch job type inside hermesd: start, resume, cancel, report, survive restarts.

A batch is the job ``batch_<run_name>`` (kind ``batch``); it has no process of
its own.  Its prompts run through a :class:`batch.executor.ItemExecutor`:
``batch_item`` children (``parent`` = the batch), or with ``executor: ray``
Ray tasks through a supervised driver (:mod:`batch.executor_ray`).  The job's ``spec`` holds
its :class:`batch.settings.Settings`; its files (``OUTPUT_DIR/RUN_NAME/``) hold
everything else.

The job goes through the job state machine like any other, as a kind without
a process (``queued → running → terminal``, see ``batch.ops.BatchPlugin``):
it ends once, with its statistics, when its run has written its files — also
when it is cancelled (``batch.cancel`` or the generic ``cancel``, which asks
:meth:`BatchService.stop`).

Restarts: a batch job is not a process, so when hermesd starts again and finds
one still ``running`` (a crash, ``kill -9``, or a shutdown in the middle of the
run) it is not ``lost``: its kind resumes at restart, and
:meth:`BatchService.restore` continues it from its files, re-owning the items
the earlier daemon left queued.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Callable

from batch import card, dataset as dataset_mod, distributions, groups
from batch.checkpoint import NAME as CHECKPOINT_NAME, Checkpoint, CheckpointError
from batch.executor_ray import RayExecutor
from batch.job import STATISTICS, BatchRun
from batch.trajectories import TRAJECTORIES, batch_files
from batch.executor_local import SupervisorExecutor
from batch.settings import Settings, filter_change, job_id_of, no_run
from hermesd import jobs as jobs_mod
from hermesd.billing.ledger import Ledger
from hermesd.billing.ops import ledger_of
from hermesd.containers import engine as containers
from hermesd.contract.states import LIVE, STOP_REASONS, JobStatus
from hermesd.protocol import ProtocolError

log = logging.getLogger("hermesd.batch")

ERRORS_SHOWN = 50
"""At most this many bad-line messages travel in a status record."""
NO_SAMPLE = (" (no sample kept: `datasets.load_dataset(RUN_DIR)` raises on an empty split, as every `datasets` "
             "release to 5.2 does — with streaming=True it gives the declared features and no row)")
"""Said after the count of ``trajectories.jsonl`` when it is 0 (the summary of a run)."""


def _unmake(run_dir: Path | None) -> None:
    """Remove the folder a new run's ``open`` made (its checkpoint and card, nothing else in it yet),
    after its job could not be stored; ``None``: the folder was there before, keep it."""
    if run_dir is None:
        return
    for name in (CHECKPOINT_NAME, card.NAME):
        (run_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile, keep it
        run_dir.rmdir()


class BatchService:
    """Every batch run of one daemon (``BatchPlugin.service``, made at the first batch op)."""

    def __init__(self, ctx: Any):
        self.d = ctx
        self.executor = SupervisorExecutor(ctx)
        self.ray = RayExecutor(ctx)
        self.executors = {"local": self.executor, "ray": self.ray}
        self.runs: dict[str, BatchRun] = {}
        ctx.runner.on_warm_start(self._refill)  # items wait for a warm start on its way

    def _refill(self) -> None:
        """A start is at hand again: every live run hands out the prompts it held back."""
        for run in list(self.runs.values()):
            if not run.closed and run.executor.ready():
                run.fill()

    # starting ----------------------------------------------------------------

    def _dataset(self, s: Settings) -> dataset_mod.Dataset:
        """Read the dataset, each prompt with known secrets redacted (:mod:`hermesd.redaction`); refuse it when a line asks for a container that cannot be had
        (a bad image name, no engine installed).  Raises ``ProtocolError`` naming the line."""
        try:
            data = groups.expand(dataset_mod.read(s.dataset_file, s.max_samples), s.samples_per_prompt)
        except dataset_mod.DatasetError as exc:
            raise ProtocolError("bad_request", str(exc), {"field": "dataset_file"}) from None
        if not data.prompts:
            why = (f"{len(data.errors)} bad line(s); the first: {data.errors[0]}" if data.errors
                   else "the file has no lines")
            raise ProtocolError("bad_request", f"{s.dataset_file}: no usable prompt ({why})",
                                {"field": "dataset_file", "file": s.dataset_file})
        redactor = self.d.router.redactor(self.d.config)  # a key in the file is stored as no client's text is
        if redactor.pairs:
            data.prompts = [dataclasses.replace(p, prompt=redactor.text(p.prompt)) for p in data.prompts]
        boxed = [p for p in data.prompts if p.docker_image]
        for prompt in boxed:
            try:
                containers.check_image(prompt.docker_image)
                if prompt is boxed[0]:
                    containers.find_engine(self.d.config.terminal)
            except (ValueError, containers.EngineError) as exc:
                raise ProtocolError(
                    "bad_request", f"{s.dataset_file}:{prompt.line}: docker_image {prompt.docker_image!r}: {exc} "
                    f"({len(boxed)} line(s) ask for a container; without the field a prompt runs on the host)",
                    {"field": "docker_image", "file": s.dataset_file, "line": prompt.line}) from None
        return data

    def _open(self, job_id: str, s: Settings, data: dataset_mod.Dataset) -> BatchRun:
        run = BatchRun(job_id, s, data, self.executors[s.executor], lambda etype, payload: self.d.events.emit(
            etype, job=job_id, data=payload, durable=False), self._finished, self._offload,
            RunBill(ledger_of(self.d), job_id))
        try:
            run.open()
        except (OSError, CheckpointError) as exc:
            raise ProtocolError("bad_request", f"cannot open the run directory {s.run_dir}: {exc}",
                                {"field": "output_dir"}) from None
        return run

    @staticmethod
    def _unchanged(s: Settings, stored: Checkpoint | None, data: dataset_mod.Dataset) -> None:
        """Raise ``bad_request`` naming the first line of the dataset that changed since the
        checkpoint ``stored`` was written (see :mod:`batch.checkpoint`)."""
        index = dataset_mod.first_change(stored.line_digests, data.digests) if stored is not None else None
        if index is not None:
            what = "removed" if index >= len(data.digests) else "not the line that ran"
            raise ProtocolError("bad_request", f"cannot resume {s.run_name!r}: {s.dataset_file}:{index + 1} changed "
                                f"since the run began ({what}); prompts are known by their line, so a resume would "
                                "mix them up: restore the file, start a new --run_name, or pass "
                                "--allow-changed-dataset", {"field": "dataset_file", "file": s.dataset_file,
                                                            "line": index + 1})

    def run(self, s: Settings, *, resume: bool, allow_changed: bool = False,
            idempotency_key: str | None = None) -> dict[str, Any]:
        """Start batch ``s.run_name`` (or continue it with ``resume``); returns its record with
        ``warnings``.
        ``idempotency_key``: the request's, stored with the job (``hermesd.idempotency``).

        ``warnings``: what the user should know (a resume that changes the filters:
        :func:`batch.settings.filter_change`).

        Raises ``ProtocolError``: ``invalid_state`` when it is already running or
        its directory holds a run and ``resume`` is off; ``bad_request`` for a
        ``resume`` of a run that does not exist (naming its directory), an
        unreadable dataset, a ``docker_image`` line that cannot run (no engine), a
        checkpoint whose fixed settings differ, a dataset changed in place since the
        run began (unless ``allow_changed``), or an unusable output directory.
        """
        job_id = job_id_of(s.run_name)
        row = self.d.jobs.get(job_id)
        if row is not None and row["status"] not in jobs_mod.TERMINAL:
            raise ProtocolError("invalid_state", f"batch {s.run_name} is already {row['status']} (job {job_id}); "
                                f"follow it with `hermesctl batch status {s.run_name}` or stop it with "
                                f"`hermesctl batch cancel {s.run_name}`", {"job": job_id, "status": row["status"]})
        try:
            stored = Checkpoint.load(s.run_dir)
        except CheckpointError as exc:
            raise ProtocolError("bad_request", str(exc), {"field": "run_name"}) from None
        if resume and stored is None and not batch_files(s.run_dir):
            raise no_run(s.run_name, s.run_dir)
        if (stored is not None or batch_files(s.run_dir)) and not resume:
            raise ProtocolError("invalid_state", f"{s.run_dir} already holds run {s.run_name!r}; pass --resume to "
                                "continue it (nothing finished runs again), or choose another --run_name or "
                                "--output_dir", {"field": "run_name", "run_dir": str(s.run_dir)})
        data = self._dataset(s)
        conflicts = s.conflicts(stored.settings) if stored is not None else []
        if conflicts:
            raise ProtocolError("bad_request", f"cannot resume {s.run_name!r}: " + "; ".join(conflicts),
                                {"field": conflicts[0].split()[0].lstrip("-")})
        if not allow_changed:
            self._unchanged(s, stored, data)
        made = None if stored is not None or s.run_dir.exists() else s.run_dir
        run = self._open(job_id, s, data)
        refiltered = filter_change(stored.settings, s.filters, list(run.written.values())) if stored else None
        if refiltered:
            log.warning("batch %s: %s", s.run_name, refiltered)
        try:
            self.d.jobs.create("batch", id=job_id, replace_ended=True, goal=f"batch {s.run_name}: {s.dataset_file}",
                               model=s.model, toolsets=list(distributions.get(s.distribution, s.distribution_toolsets)),
                               spec=s.to_dict(), idempotency_key=idempotency_key)
        except BaseException:
            _unmake(made)  # the request may be run again (hermesd.unwritable): it must find no run of its own
            raise
        self._go(run)
        return {**self.record(job_id), "warnings": [refiltered] if refiltered else []}

    def _go(self, run: BatchRun, *, adopt: bool = False) -> None:
        status = self.d.jobs.require(run.job_id)["status"]
        if status != JobStatus.RUNNING:
            self.d.jobs.transition(run.job_id, JobStatus.RUNNING)
        else:
            self.d.events.emit("batch.restarting", job=run.job_id, data={"previous": status})
        self.runs[run.job_id] = run
        run.start(adopt=adopt, defer=self.d.loop.call_soon if adopt else None)

    def _offload(self, work: Callable[[], Any], done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``work`` in a worker thread; ``done(value, exception)`` on the event loop."""
        def settle(future: Any) -> None:
            try:
                exc = future.exception()
                done(None if exc else future.result(), exc)
            except Exception:  # noqa: BLE001 - e.g. the state database closed at shutdown: the next start redoes it
                log.exception("finishing a batch run failed")

        self.d.loop.run_in_executor(None, work).add_done_callback(settle)

    def stop(self, row: dict[str, Any], reason: str) -> None:
        """Stop batch job ``row`` for ``reason`` (the generic ``cancel``): its run
        finishes (items interrupted, files written), then the job ends ``cancelled``."""
        run = self.runs.get(row["id"])
        if run is None:  # no live run (it never opened): nothing to write
            self.d.jobs.transition(row["id"], JobStatus.CANCELLED, exit_reason="interrupted", stop_reason=reason,
                                   error=STOP_REASONS[reason].error if reason in STOP_REASONS else reason)
        elif not run.closed:
            run.finish("cancelled", STOP_REASONS[reason].error if reason in STOP_REASONS else reason)

    def _finished(self, run: BatchRun, status: str, stats: dict[str, Any] | None, error: str | None) -> None:
        self.runs.pop(run.job_id, None)
        fields: dict[str, Any] = {"duration_seconds": run.active_seconds(), "error": error,
                                  "exit_reason": "completed" if status == "completed" else
                                  ("interrupted" if status == "cancelled" else
                                   "budget_exceeded" if run.budget_stop else "error")}
        if stats is not None:
            p = stats["prompts"]
            fields.update(api_calls=stats["api_calls"], tokens_in=stats["tokens"]["input"],
                          tokens_out=stats["tokens"]["output"],
                          summary=f"{p['written']} of {p['total']} prompts written ({p['completed']} completed, "
                                  f"{p['partial']} partial), {p['discarded_no_reasoning']} discarded (no reasoning), "
                                  f"{p['discarded_invalid_tool_calls']} discarded (stopped on invalid tool calls), "
                                  f"{p['filtered_invalid_tools']} filtered (unknown tools), "
                                  f"{p['filtered_synthetic']} filtered (synthetic: --allow_synthetic keeps them), "
                                  f"{p['filtered_partial']} filtered (partial), "
                                  f"{p['filtered_below_min_reward']} filtered (below --min_reward), "
                                  f"{p['failed']} failed, "
                                  f"{p['pending']} pending; {p['in_trajectories']} in {run.run_dir / TRAJECTORIES}"
                                  + ("" if p["in_trajectories"] else NO_SAMPLE) + _scores_text(stats))
        self.d.jobs.transition(run.job_id, status, **fields)

    # reports -----------------------------------------------------------------

    @staticmethod
    def _stored_rewards(s: Settings) -> dict[str, Any] | None:
        """The ``rewards`` of a run that is not live, from its ``statistics.json`` (None: none yet)."""
        try:
            stats = json.loads((s.run_dir / STATISTICS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return stats.get("rewards") if isinstance(stats, dict) else None

    def find(self, ident: str) -> dict[str, Any]:
        """The batch job row named by job id or run name.  Raises ``not_found``."""
        for job_id in (ident, job_id_of(ident)):
            row = self.d.jobs.get(job_id)
            if row is not None and row["kind"] == "batch":
                return row
        raise ProtocolError("not_found", f"no batch {ident!r} (hermesctl batch list shows them)", {"job": ident})

    def record(self, job_id: str) -> dict[str, Any]:
        """The batch's job record plus ``run_name``, ``run_dir``, ``settings``,
        ``progress`` (see :meth:`BatchRun.progress`; from the checkpoint when the
        run is not live), ``executor`` (``{name}``; with ``ray`` while live:
        ``address, nodes, cpus, cpus_free, fits, shapes, driver, driver_starts, in_flight,
        waiting``), ``bad_lines``, ``errors`` (first bad lines), ``problems``,
        ``failures`` (the commonest errors of failed prompts: ``[{error, count}]``),
        ``usage`` (what the run spent: ``Ledger.spent``; ``cost_usd``, ``cost_unknown`` too),
        ``files`` and ``seq`` (the last event seq, to follow from)."""
        row = self.d.jobs.require(job_id)
        s = Settings.from_dict(row["spec"])
        rec = jobs_mod.record(row)
        usage = RunBill(ledger_of(self.d), job_id).of_run()
        rec.update(usage=usage, cost_usd=usage["cost_usd"], cost_unknown=usage["cost_unknown"])
        run = self.runs.get(job_id)
        rec.update(run_name=s.run_name, run_dir=str(s.run_dir), settings=s.to_dict(),
                   executor=self.executors[s.executor].describe(job_id) or {"name": s.executor},
                   files={name: str(s.run_dir / name) for name in (TRAJECTORIES, STATISTICS, "checkpoint.json")},
                   seq=self.d.events.last_seq())
        if run is not None:
            rec.update(progress=run.progress(), bad_lines=len(run.dataset.errors),
                       errors=run.dataset.errors[:ERRORS_SHOWN], problems=run.problems,
                       failures=run.checkpoint.commonest_errors())
        else:
            try:
                ckpt = Checkpoint.load(s.run_dir)
            except CheckpointError:
                ckpt = None
            rec.update(progress=self._stored_progress(ckpt) if ckpt else None,
                       bad_lines=ckpt.bad_lines if ckpt else None, errors=[], problems=[],
                       failures=ckpt.commonest_errors() if ckpt else [])
            if rec["progress"] is not None:
                rec["progress"]["rewards"] = self._stored_rewards(s)
        return rec

    @staticmethod
    def _stored_progress(ckpt: Checkpoint) -> dict[str, Any]:
        settled = len(ckpt.done) + len(ckpt.discarded)
        return {"total": ckpt.total_prompts, "done": len(ckpt.done), "discarded": len(ckpt.discarded),
                "failed": len(ckpt.failed), "running": 0,
                "pending": max(0, ckpt.total_prompts - settled - len(ckpt.failed)),
                "processed": settled + len(ckpt.failed), "rate_per_minute": 0.0, "eta_seconds": None}

    def list(self) -> list[dict[str, Any]]:
        """Records of every batch job, oldest first."""
        return [self.record(row["id"]) for row in self.d.jobs.list(kinds=("batch",), limit=10000)]

    def cancel(self, ident: str) -> str:
        """Cancel a running batch: live items are interrupted, the files are
        finalized, then the job ends ``cancelled``.  Returns its id; ``invalid_state``
        when it is not running (or already ending)."""
        row = self.find(ident)
        run = self.runs.get(row["id"])
        if run is None or run.closed:
            raise ProtocolError("invalid_state", f"batch {row['id']} is already {row['status']}"
                                + (" (finishing)" if run is not None else ""),
                                {"job": row["id"], "status": row["status"]})
        run.finish("cancelled", "cancelled by request")
        return row["id"]

    # restarts ------------------------------------------------------------------

    def restore(self) -> None:
        """Continue every queued batch job from its files; cancel leftover items of no live batch."""
        for row in self.d.jobs.list(statuses=LIVE, kinds=("batch",)):
            try:
                s = Settings.from_dict(row["spec"])
                data = self._dataset(s)
                self._unchanged(s, Checkpoint.load(s.run_dir), data)
                run = self._open(row["id"], s, data)
            except Exception as exc:  # noqa: BLE001 - one broken batch must not stop hermesd from starting
                self.d.jobs.transition(row["id"], "failed", exit_reason="error",
                                       error=f"could not continue the batch after a restart: {exc}")
                continue
            self._go(run, adopt=True)
        self.executor.cancel_orphans(set(self.runs))
        self.executors["ray"].cancel_orphans()

    def shutdown(self) -> None:
        """Daemon shutdown: save each live run's checkpoint; the jobs stay ``running``
        and continue when hermesd starts again."""
        for run in [r for r in self.runs.values() if not r.closed]:
            try:
                run.save()
            except OSError:
                pass  # the batch files are the truth; the next start rebuilds the checkpoint


class RunBill:
    """The bill of batch job ``job_id`` (:class:`batch.job.Bill`) from the daemon's ledger."""

    def __init__(self, ledger: Ledger, job_id: str):
        self.ledger, self.job_id = ledger, job_id

    def refusal(self) -> str | None:
        """:meth:`hermesd.billing.ledger.Ledger.exhausted` of the run's job (spent, not only reserved:
        an item's own calls wait for those in flight), as text."""
        refusal = self.ledger.exhausted(self.job_id)
        return refusal.text() if refusal is not None else None

    def of_item(self, job: str) -> dict[str, Any]:
        """``cost_usd`` and ``cost_unknown`` of item ``job`` (with what it delegated)."""
        spent = self.ledger.spent(("tree", job))
        return {"cost_usd": spent["cost_usd"], "cost_unknown": spent["cost_unknown"]}

    def of_run(self) -> dict[str, Any]:
        """What the run spent, every attempt of every prompt."""
        return self.ledger.spent(("tree", self.job_id))


def _scores_text(stats: dict[str, Any]) -> str:
    """``; rewards: mean 0.42 over 10, pass rate 40% (…), pass@1 0.4, pass@4 0.7`` — '' when
    nothing was verified."""
    r, g = stats.get("rewards") or {}, stats.get("groups") or {}
    if not r.get("verified"):
        return ""
    mean = "none" if r.get("mean") is None else f"{r['mean']:.3f}"
    text = (f"; rewards: mean {mean} over {r['rewarded']}, pass rate {r['pass_rate']:.1%} ({r['passed']} passed, "
            f"{r['verifier_errors']} verifier errors)")
    if g.get("samples_per_prompt", 1) > 1 and g.get("pass@1") is not None:
        text += f", pass@1 {g['pass@1']}, pass@{g['samples_per_prompt']} {g['pass@k']}"
    return text
