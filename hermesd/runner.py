"""From ``queued`` to a terminal state: admission, start, child reports, exit.

The runner joins the scheduler (caps), the process manager (OS processes) and
the job table (state machine).  Its rules:

* A job is admitted (caps checked, row written) in one step, then started as
  soon as every pool it needs has room.
* ``child.hello`` moves it to ``running``; ``child.result`` to its terminal
  state; if the process exits without a result the exit decides.
* The final state honours why the daemon stopped it: ``cancel`` → ``cancelled``,
  ``timeout`` → ``timed_out``, ``shutdown``/``session_stop`` → ``interrupted``.
* The slots of a job's own caps are released when it turns terminal, before
  that state is published; its ``global`` slot (a process) once it is reaped
  (see :mod:`hermesd.scheduler`).
* Nothing starts while the queue is paused (:mod:`hermesd.control.pause`); a job with
  ``after`` joins the queue once those jobs completed (:mod:`hermesd.control.dependencies`).
* No healthy work is killed by a clock: a child is interrupted as ``stale``
  after its kind's limit without activity (its plugin's ``stale_after``: ``delegation.stale_after_seconds``)
  (:mod:`hermesd.control.staleness`); a wall-clock limit applies only when set
  (``timeout_seconds`` of the job, else its kind's default: ``delegation.child_timeout_seconds``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hermesd import exits, resume, secret_values
from hermesd.config import Config
from hermesd.control import dependencies
from hermesd.control.pause import QueuePause
from hermesd.control.staleness import ActivityLog, stale_error
from hermesd.contract.states import LIVE, STOP_REASONS, TERMINAL, JobStatus, exit_reason_of
from hermesd.contract.wire import JobResult, JobSpec
from hermesd.jobs import AdmissionPool, JobTable
from hermesd.plugin import Plugins
from hermesd.protocol import ProtocolError, one_line
from hermesd.redaction import PASS_ENV, SECRETS_ENV
from hermesd.scheduler import PROCESS_POOLS, Scheduler
from hermesd.system import limits
from hermesd.system.procs import Child, ProcessManager

log = logging.getLogger("hermesd")

LOG_TAIL_BYTES = 2000



def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log file as text ('' when missing)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


class Runner:
    """Job lifecycle.

    Job types plug in through ``hooks`` (:class:`hermesd.plugin.Plugins`, whose hooks
    :class:`hermesd.plugin.Plugin` declares): admission, the spec a child receives,
    its result before the terminal transition, its exit, and the stop of a job kind
    without a process.
    """

    def __init__(self, config: Config, jobs: JobTable, scheduler: Scheduler, procs: ProcessManager,
                 children_socket: Path, loop: Any, hooks: Plugins | None = None):
        self.config = config
        self.jobs = jobs
        self.scheduler = scheduler
        self.procs = procs
        self.children_socket = children_socket
        self.loop = loop
        self.tokens: dict[str, str] = {}
        self.results: dict[str, JobResult] = {}
        self.hooks = hooks if hooks is not None else Plugins()
        self.accepting = True
        self._timeouts: dict[str, Any] = {}
        self._paused: dict[str, float] = {}  # job → seconds its backstop had left when it paused
        self._counters: dict[str, dict[str, Any]] = {}  # progress counters, written with the next group commit
        self._doing: dict[str, exits.Doing] = {}  # what each child last said it was doing
        jobs.events.flush_hooks.append(self._write_counters)
        jobs.terminal_hooks.append(self._forget_secrets)
        self.pause = QueuePause(jobs.store)
        self.activity = ActivityLog()
        self.stop_errors: dict[str, str] = {}  # why the daemon stopped a job, when it says more than the reason
        self.waiting: set[str] = set()  # queued jobs waiting for the jobs of their ``after``
        self._stale_timer: Any = None

    # admission -----------------------------------------------------------

    def job_dir(self, job: str) -> Path:
        """``jobs/ID/``: the job's bookkeeping (its log, its trajectory) and its work directory."""
        return self.config.log_dir() / job

    def work_dir(self, job: str) -> Path:
        """``jobs/ID/work/``: the working directory of a job given none, which then holds only
        the job's own work (its log and trajectory are beside it, in :meth:`job_dir`)."""
        return self.job_dir(job) / "work"

    def cwd_of(self, row: dict[str, Any]) -> str:
        """The working directory of job ``row``: its ``cwd``, else :meth:`work_dir`."""
        return row.get("cwd") or str(self.work_dir(row["id"]))

    def log_path(self, job: str) -> Path:
        """``jobs/ID/log``: the child's stdout and stderr."""
        return self.job_dir(job) / "log"

    def submit(self, kind: str, *, pools: tuple[str, ...] = (), background: bool = False,
               queue: bool = False, **fields: Any) -> dict[str, Any]:
        """Admit a job and start it when its pools have room; returns its row.

        A job of a kind that holds a pool from admission (:attr:`hermesd.jobs.JobKind.pool`:
        background delegations' ``async``) takes its slot now (``capacity_reached`` when full
        unless ``queue``; paused, or waiting for ``after``, it waits for it in the queue).  The plugins' ``admit`` hook may change its fields
        first (a spec ``image`` becomes the spec's ``container``:
        :class:`hermesd.containers.ops.ContainersPlugin`).  Raises ``ProtocolError``
        (``shutting_down``, ``bad_request`` for a missing cwd or a container
        that cannot be had, ``capacity_reached``).
        """
        if not self.accepting:
            raise ProtocolError("shutting_down", "hermesd is shutting down and accepts no new work")
        cwd = fields.get("cwd")
        if cwd is not None and not Path(cwd).is_dir():
            why = "is not a directory" if Path(cwd).exists() else "does not exist"
            raise ProtocolError("bad_request", f"cwd: working directory {cwd!r} {why}", {"field": "cwd"})
        job_id = fields.pop("id", None) or self.jobs.new_id(kind)
        after = (fields.get("spec") or {}).get("after")
        if after is not None:
            fields["spec"]["after"] = dependencies.check(job_id, after, self.jobs.get)
        self.hooks.admit(job_id, kind, fields)
        values = fields.pop("secret_values", None)
        if values:
            secret_values.write(self.job_dir(job_id), values)
        needs = ("global", *pools)
        held = self._admission_pool(kind)
        if held:  # while paused nothing is refused: it waits for its slot in the queue
            if after or self.pause.paused or not self.scheduler.admit(job_id, held.name, queue=queue,
                                                                      refusal=held.refusal, setting=held.setting):
                needs = (held.name, *needs)
        before = set(self.procs.children)
        try:
            # The row and, when the job fits at once, its start: one commit (one fsync) before
            # the reply.  The child is forked inside the transaction; if the commit fails, the
            # children started in it are killed (no row shows them) and the job was not admitted.
            with self.jobs.store.transaction():
                row = self.jobs.create(kind, id=job_id, background=int(background), pools=list(pools), **fields)
                self._enqueue(row, needs)
                self.pump()
        except BaseException:
            for started in set(self.procs.children) - before:
                self.procs.kill_now(started, "cancel")  # its slots go back once it is reaped
            if job_id not in self.procs.children:
                self.scheduler.release(job_id)
            if values:
                secret_values.remove(self.job_dir(job_id))
            raise
        return self.jobs.require(job_id)

    def requeue(self, row: dict[str, Any]) -> None:
        """Put a ``queued`` job read back from the database into the scheduler (restart),
        for the pools of its row; a job already waiting goes to the back of the queue."""
        self.scheduler.release(row["id"])
        self._enqueue(row, self._needs(row))

    def _admission_pool(self, kind: str) -> AdmissionPool | None:
        """The pool jobs of ``kind`` hold from admission (:attr:`hermesd.jobs.JobKind.pool`), or None."""
        declared = self.hooks.kinds.get(kind)
        return declared.pool if declared else None

    def _needs(self, row: dict[str, Any]) -> tuple[str, ...]:
        """Every pool queued job ``row`` waits for: its kind's admission pool, ``global``, its own ``pools``."""
        held = self._admission_pool(row["kind"])
        return (*([held.name] if held else []), "global", *(row.get("pools") or []))

    def cancel_queued(self, job_id: str, error: str, status: str = JobStatus.CANCELLED,
                      **fields: Any) -> dict[str, Any]:
        """End job ``job_id``, still ``queued`` (never started), as ``status`` with exit reason
        ``interrupted``, ``error`` and ``fields`` (columns); its place in the queue and any slot
        are given back first.  No hook hears of it: the caller owns the job (a batch's items).
        Returns the row; raises ``ProtocolError`` as :meth:`hermesd.jobs.JobTable.transition`."""
        self.scheduler.release(job_id)
        return self.jobs.transition(job_id, status, exit_reason="interrupted", error=error, **fields)

    # pools a job type opens for its own jobs (a batch run's ``batch:<id>``) ---------------

    def open_pool(self, pool: str, limit: int) -> None:
        """Create pool ``pool`` or change its limit to ``limit`` holders (lowering it
        stops no running job); jobs name it in :meth:`submit`'s ``pools``."""
        self.scheduler.set_limit(pool, limit)

    def close_pool(self, pool: str) -> None:
        """Forget pool ``pool``: the jobs still queued for it no longer wait for it (a pool
        without a limit is unlimited)."""
        self.scheduler.limits.pop(pool, None)

    def warm_start_at_hand(self) -> bool:
        """False while no warm start is at hand but one is on its way: a child started a
        moment later starts faster (:meth:`hermesd.system.procs.Spawner.at_hand`)."""
        return self.procs.spawner.at_hand()

    def on_warm_start(self, callback: Any) -> None:
        """Call ``callback()`` (no arguments) each time a warm start is at hand again
        (:meth:`hermesd.system.procs.Spawner.subscribe`)."""
        self.procs.spawner.subscribe(callback)

    def _enqueue(self, row: dict[str, Any], needs: tuple[str, ...]) -> None:
        """Queue a job for its pools, or keep it waiting for its ``after`` jobs, or fail it when one failed."""
        verdict, error = dependencies.state(row, self.jobs.get)
        if verdict == "ready":
            self.waiting.discard(row["id"])
            self.scheduler.enqueue(row["id"], needs)
        elif verdict == "wait":
            self.waiting.add(row["id"])
        else:
            self.waiting.discard(row["id"])
            self.scheduler.release(row["id"])
            self.jobs.transition(row["id"], "failed", exit_reason="dependency", error=error)

    def _release_dependents(self) -> None:
        """A job ended: the jobs waiting for it join the queue, or fail (and so on, down the chain)."""
        before = None
        while before != self.waiting:
            before = set(self.waiting)
            for job_id in before:
                row = self.jobs.get(job_id)
                if row is None or row["status"] != "queued":
                    self.waiting.discard(job_id)
                    continue
                self._enqueue(row, self._needs(row))

    def queue_state(self) -> dict[str, Any]:
        """``{paused, paused_at, waiting_for_jobs}``: the queue's state (``status``, ``pause``, ``resume``)."""
        return {**self.pause.describe(), "waiting_for_jobs": len(self.waiting)}

    def pump(self) -> None:
        """Start every queued job that now fits its caps (none while the queue is paused)."""
        if not self.accepting or self.pause.paused:
            return
        for job_id in self.scheduler.take_startable():
            try:
                self._start(job_id)
            except Exception as exc:  # noqa: BLE001 - a job that cannot start must not hold its slots
                log.exception("starting %s failed", job_id)
                self._fail_start(job_id, f"{exc.__class__.__name__}: {exc}")

    def _start(self, job_id: str) -> None:
        row = self.jobs.get(job_id)
        if row is None or row["status"] != "queued":
            self.scheduler.release(job_id)
            return
        token = os.urandom(16).hex()  # secrets.token_hex(16), without importing secrets (see jobs.new_id)
        self.tokens[job_id] = token
        try:
            self.job_dir(job_id).mkdir(mode=0o700, parents=True, exist_ok=True)
            resume.fresh_journal(self, row)
            if not row.get("cwd"):
                self.work_dir(job_id).mkdir(mode=0o700, exist_ok=True)
            child = self.procs.start(job_id, cwd=self.cwd_of(row),
                                     log_path=self.log_path(job_id),
                                     env={**self._job_env(row),
                                          **{k: v for part in self.hooks.child_env(row) for k, v in part.items()},
                                          "HERMES_CHILD_SOCKET": str(self.children_socket),
                                          "HERMES_CHILD_TOKEN": token},
                                     title=[row["kind"], one_line(row.get("goal"))[:80]],
                                     resources=limits.for_child(row.get("spec") or {}, limits.effective(
                                         limits.ceiling(self.config.child_limits), (row.get("spec") or {}).get("resources"))))
        except (OSError, ValueError) as exc:  # ValueError: what exec refuses, e.g. a NUL byte
            self._fail_start(job_id, str(exc))
            return
        # ``starting`` is committed after the fork, with the pid, in one transaction (that of
        # ``submit`` when the job starts at once): the loop cannot see the child's hello or exit
        # before it.  A daemon that dies in between leaves a ``queued`` job (run again after the
        # restart) or none (never acknowledged), and a child that dies with it.
        try:
            self.jobs.transition(job_id, "starting", pid=child.pid, proc_start=self.procs.os.start_time(child.pid))
        except BaseException:  # e.g. the disk is full: no child may run that its row does not show
            self.procs.kill_now(job_id, "cancel")
            raise
        self.activity.seen(job_id)
        self._arm_stale_check()
        timeout = self._timeout_of(row)
        if timeout is not None:  # opt-in: the child enforces its own wall clock; this timer is the backstop
            self._timeouts[job_id] = self.loop.call_later(timeout + 5.0, self._on_timeout, job_id)

    def _job_env(self, row: dict[str, Any]) -> dict[str, str]:
        """The variables job ``row`` was given (its plain values, its secret values from
        :mod:`hermesd.secret_values`; a name without either is the daemon's), and what its child is
        told of them (:class:`hermesd.redaction.Secrets`): which are secret beyond the patterns
        (``secrets:``, the job's ``secrets``) and which its tools get (``terminal.pass_env``, all the
        job was given).  Raises ``OSError`` when its secret values are gone."""
        spec = row.get("spec") or {}
        env = spec.get("env") or {}
        given = {k: v for k, v in env.items() if v is not None}
        if spec.get("secret_values"):
            given |= secret_values.read(self.job_dir(row["id"]), spec["secret_values"])
        return {**given, SECRETS_ENV: ",".join([*self.config.secrets, *(spec.get("secrets") or [])]),
                PASS_ENV: ",".join([*self.config.terminal.pass_env, *env])}

    def _forget_secrets(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """A terminal hook: once the job's end is committed, its secret values are removed."""
        if (row.get("spec") or {}).get("secret_values"):
            self.jobs.store.after_commit(lambda: secret_values.remove(self.job_dir(row["id"])))
        return []

    def pause_timeout(self, job_id: str) -> None:
        """Job ``job_id`` waits for a person (``hermesd.control.approvals``): its wall-clock backstop
        stops counting until :meth:`resume_timeout` (the child pauses its own clock the same way)."""
        handle = self._timeouts.pop(job_id, None)
        if handle is not None:
            handle.cancel()
            self._paused[job_id] = max(0.0, handle.when() - self.loop.time())

    def resume_timeout(self, job_id: str) -> None:
        """The wait of :meth:`pause_timeout` is over: the backstop counts what it had left."""
        left = self._paused.pop(job_id, None)
        if left is not None and job_id in self.tokens:
            self._timeouts[job_id] = self.loop.call_later(left, self._on_timeout, job_id)

    def _timeout_of(self, row: dict[str, Any]) -> float | None:
        """The job's wall-clock limit in seconds: its ``timeout_seconds``, else its kind's default
        (``spec_defaults``: ``delegation.child_timeout_seconds``); None (the default) for none."""
        limit = (row.get("spec") or {}).get("timeout_seconds") or self.hooks.spec_defaults(row).get("timeout_seconds")
        return None if limit is None else float(limit)

    def _stale_after(self, job_id: str) -> float | None:
        """Seconds of quiet after which job ``job_id`` is stale: its plugin's ``stale_after`` (None: never)."""
        return self.hooks.stale_after(self.jobs.get(job_id))

    def _arm_stale_check(self) -> None:
        """Check a quarter of the shortest live job's stale limit from now (at most 5 s), unless none has one."""
        if self._stale_timer is None:
            limits = [limit for job in list(self.activity.jobs)
                      if (limit := self.activity.limit(job, self._stale_after)) is not None]
            if limits:
                self._stale_timer = self.loop.call_later(min(5.0, min(limits) / 4), self.check_stale)

    def doing(self, job_id: str) -> exits.Doing:
        """What job ``job_id`` last said it was doing (an empty :class:`exits.Doing` when nothing)."""
        return self._doing.get(job_id) or exits.Doing()

    def check_stale(self) -> None:
        """Timer: interrupt every child quiet for its kind's stale limit (its plugin's ``stale_after``;
        and not waiting for subagents of its own), with a reason that says what it was doing."""
        self._stale_timer = None
        for job_id, idle, since, limit in self.activity.stale(self._stale_after):
            if job_id in self.stop_errors or (job_id not in self.procs.children and self._has_process(job_id)):
                continue  # being stopped, or its process is gone (its exit ends it)
            if self.jobs.list(parent=job_id, statuses=LIVE, limit=1):
                self.activity.seen(job_id)  # it waits for its subagents, which are watched themselves
                continue
            error = stale_error(idle, self.doing(job_id).where() or "starting", since, limit)
            log.warning("%s: %s", job_id, error)
            try:
                self.stop(job_id, "stale", error)
            except ProtocolError:
                pass
        if self.activity.jobs:
            self._arm_stale_check()

    def _has_process(self, job_id: str) -> bool:
        row = self.jobs.get(job_id)
        return row is None or self.jobs.kind(row["kind"]).process

    def _fail_start(self, job_id: str, error: str) -> None:
        """A job whose child could not be started: ``failed``, its token and slots given back."""
        self.tokens.pop(job_id, None)
        row = self.jobs.get(job_id)
        if row is not None and row["status"] not in TERMINAL:
            self.jobs.transition(job_id, "failed", exit_reason="error", error=f"could not start child: {error}")
        self._finished(job_id)

    def _on_timeout(self, job_id: str) -> None:
        """The daemon's backstop for ``child_timeout_seconds`` (the child has its own clock)."""
        row = self.jobs.get(job_id)
        if row is not None and row["status"] not in TERMINAL:
            self.stop(job_id, "timeout")
        elif job_id in self.procs.children:  # reported, but the process lingers
            self.procs.stop(job_id, "timeout")

    # child reports -------------------------------------------------------

    def authenticate(self, args: dict[str, Any]) -> str:
        """Return the job id of a child message whose token matches; raises ``not_found``."""
        job_id, token = args.get("job"), args.get("token")
        if not isinstance(job_id, str) or not isinstance(token, str) or self.tokens.get(job_id) != token:
            raise ProtocolError("not_found", "unknown child or wrong token")
        return job_id

    def child_spec(self, row: dict[str, Any]) -> dict[str, Any]:
        """The job spec (:class:`hermesd.contract.wire.JobSpec`, as its wire map) a child
        receives in reply to ``child.hello``: the config's values and the defaults of the job's
        kind (its plugin's ``spec_defaults``), then every plugin's ``any_spec`` hook, then the row's
        ``spec`` column (the keys that are fields of the kind's own part, ``JobKind.spec``, into
        ``part``), the kind's entry point (``JobKind.entry``), then the spec hook of the job's kind."""
        cfg = self.config
        defaults = dict(self.hooks.spec_defaults(row))
        provider, model = defaults.pop("provider", None), defaults.pop("model", None)
        spec = JobSpec(
            job=row["id"], kind=row["kind"], goal=row.get("goal") or "", context=row.get("context"),
            toolsets=row.get("toolsets") or [], role=row.get("role") or "leaf",
            provider=row.get("provider") or provider or cfg.provider, model=row.get("model") or model or cfg.model,
            base_url=cfg.base_url, reasoning_effort=cfg.reasoning_effort,
            cwd=self.cwd_of(row), depth=row.get("depth") or 0,
            limits={"max_output_bytes": cfg.limits.max_output_bytes, "max_file_bytes": cfg.limits.max_file_bytes,
                    "terminal_timeout_seconds": cfg.limits.terminal_timeout_seconds},
            record_trajectory=True, journal=resume.spec_journal(self, row),
            context_windows=dict(cfg.context_windows) or None, **defaults)
        self.hooks.any_spec(row, spec)
        kind = self.jobs.kind(row["kind"])
        names, own = JobSpec.names(), (kind.spec.names() if kind.spec else frozenset())
        part: dict[str, Any] = {}
        for key, value in (row.get("spec") or {}).items():
            if key in names:  # the rest (a batch item's prompt_index, after, env…) is the daemon's bookkeeping
                setattr(spec, key, value)
            elif key in own:
                part[key] = value
        spec.entry = kind.entry
        spec.part = kind.spec.from_wire(part).to_wire() if kind.spec else None
        self.hooks.spec(row, spec)
        return spec.to_wire()

    def on_hello(self, job_id: str, pid: int | None) -> dict[str, Any]:
        """``child.hello``: the job goes ``running``; returns its spec."""
        row = self.jobs.require(job_id)
        self.activity.seen(job_id)
        if row["status"] == "starting":
            row = self.jobs.transition(job_id, "running")
        elif row["status"] != "running":
            raise ProtocolError("invalid_state", f"job {job_id} is {row['status']}")
        spec = self.child_spec(row)
        self.procs.spawner.expect(spec.get("provider"))  # the next warm children have its SDK
        return spec

    def on_result(self, job_id: str, result: JobResult) -> None:
        """``child.result``: remember it; the job turns terminal now."""
        self.results[job_id] = result
        row = self.jobs.require(job_id)
        if row["status"] in TERMINAL:
            return
        self.hooks.on_result(row, result)
        self.hooks.any_result(row, result)
        child = self.procs.children.get(job_id)
        self._terminal(job_id, result, child.stop_reason if child else None)

    def _terminal(self, job_id: str, result: JobResult | None, stop_reason: str | None,
                  returncode: int | None = None, limit: str | None = None) -> None:
        """The terminal transition: the child's report, overridden by the daemon's
        ``stop_reason``; without either, ``limit`` (the limit that killed it, from
        :func:`hermesd.system.limits.exceeded`) or the exit status and the log's tail."""
        row = self.jobs.require(job_id)
        if stop_reason == "shutdown" and resume.at_shutdown(self, row, result):
            return  # back in the queue: it resumes at the next start
        result = result or JobResult()
        status = result.status if result.status in TERMINAL else None
        stop = STOP_REASONS.get(stop_reason or "")
        if stop is not None and stop.status is not None:
            status = stop.status
        error = result.error
        exit_reason = result.exit_reason
        doing = self._doing.get(job_id) or exits.Doing()
        if status is None and limit is not None:  # killed for exceeding a limit: named, not a signal number
            killed = STOP_REASONS["resource_limit"]
            status, error = killed.status, limit + (f" while {doing.where()}" if doing.where() else "")
            exit_reason = killed.exit_reason
        if status is None:
            status = JobStatus.FAILED
            tail = log_tail(self.log_path(job_id)).strip()
            error = exits.exit_error(returncode, doing, row.get("provider") or self.hooks.spec_defaults(row).get(
                "provider") or self.config.provider)
            if tail:
                error += f"; last log lines:\n{tail[-800:]}"
        if job_id in self.stop_errors:
            error = self.stop_errors[job_id]
        elif stop_reason == "timeout" and not str(error or "").startswith("timed out"):
            error = exits.timeout_error(self._timeout_of(row) or 0.0, doing)
        if stop_reason and not error:
            error = stop.error if stop is not None else stop_reason
        tokens = result.tokens or {}
        exit_reason = ((stop.exit_reason if stop is not None and stop.status is not None else None)
                       or exit_reason or exit_reason_of(status))
        fields = {"exit_reason": exit_reason, "summary": result.summary or row.get("summary"), "error": error,
                  "api_calls": int(result.api_calls or row.get("api_calls") or 0),
                  "tokens_in": int(tokens.get("input") or row.get("tokens_in") or 0),
                  "tokens_out": int(tokens.get("output") or row.get("tokens_out") or 0),
                  "trace": result.trace or row.get("trace") or [],
                  "stop_reason": stop_reason,
                  "model": row.get("model") or result.model,
                  "provider": row.get("provider") or result.provider}
        if result.duration_seconds is not None and not row.get("resumes"):  # a resumed job: since its first start
            fields["duration_seconds"] = float(result.duration_seconds)
        self.jobs.transition(job_id, status, **fields)
        # in the same loop step as the transition: no client hears of it before the slots are free
        self.scheduler.release(job_id, keep=PROCESS_POOLS)
        self.pump()

    def on_progress(self, job_id: str, args: dict[str, Any]) -> None:
        """``child.progress``: keep counters and publish a ``job.progress`` event, both
        group-committed (a durable event, such as the job's next transition, commits them first)."""
        tokens = args.get("tokens") or {}
        fields = {}
        if isinstance(args.get("api_calls"), int):
            fields["api_calls"] = args["api_calls"]
        if isinstance(tokens, dict):
            fields.update({"tokens_in": int(tokens.get("input") or 0), "tokens_out": int(tokens.get("output") or 0)})
        if fields:
            self._counters.setdefault(job_id, {}).update(fields)
        self._doing.setdefault(job_id, exits.Doing()).update(args)
        self.activity.seen(job_id)
        data = {k: args[k] for k in ("turn", "tool", "activity", "api_calls", "tokens", "text") if k in args}
        row = self.jobs.get(job_id)
        if row is not None and "tokens" in data:  # the cost the bill recorded of these totals, as ps shows it
            data.update(cost_usd=round(float(row.get("cost_usd") or 0.0), 6), cost_unknown=bool(row.get("cost_unknown")))
        self.jobs.events.emit("job.progress", job=job_id, session=row.get("session") if row else None,
                              data=data, durable=False)

    def _write_counters(self) -> None:
        pending, self._counters = self._counters, {}
        for job_id, fields in pending.items():
            self.jobs.update(job_id, **fields)

    # stopping and exit ---------------------------------------------------

    def stop(self, job_id: str, reason: str, error: str | None = None) -> dict[str, Any]:
        """Cancel a queued job at once, or begin the graceful stop of a live one.
        ``error``: the job's error text, over whatever the child reports (why it was stopped).

        Returns the row.  Raises ``not_found``, or ``invalid_state`` for a job
        already terminal.
        """
        row = self.jobs.require(job_id)
        if row["status"] in TERMINAL:
            raise ProtocolError("invalid_state", f"job {job_id} is already {row['status']}",
                                {"job": job_id, "status": row["status"]})
        if error is not None:
            self.stop_errors[job_id] = error
        if row["status"] == "queued":
            stop = STOP_REASONS.get(reason)
            row = self.cancel_queued(job_id, f"{reason} before it started",
                                     stop.status if stop and stop.status else JobStatus.CANCELLED, stop_reason=reason)
            self._finished(job_id)
            return row
        if not self.jobs.kind(row["kind"]).process:  # its plugin ends it, through its own transition
            self.hooks.stop(row, reason)
            return self.jobs.require(job_id)
        if not self.procs.stop(job_id, reason):  # starting, but the process is already gone
            self._terminal(job_id, None, reason)
        return self.jobs.require(job_id)

    def ended(self, job_id: str) -> None:
        """A job without a process here (an item on a Ray cluster) was ended by its plugin,
        through its own terminal transition: the runner forgets it (its activity, what it was
        doing, why it was stopped) and the exit hooks run, as after a child's reap."""
        self._finished(job_id)

    def on_exit(self, child: Child) -> None:
        """Called by the process manager once a child has been reaped."""
        job_id = child.job
        row = self.jobs.get(job_id)
        if row is not None and row["status"] not in TERMINAL:
            self._terminal(job_id, self.results.get(job_id), child.stop_reason, child.returncode,
                           limits.exceeded(child.limits, child.returncode, child.oom_killed, child.memory_used))
        self._finished(job_id)

    def _finished(self, job_id: str) -> None:
        self._paused.pop(job_id, None)
        handle = self._timeouts.pop(job_id, None)
        if handle is not None:
            handle.cancel()
        self.tokens.pop(job_id, None)
        self.results.pop(job_id, None)
        self._doing.pop(job_id, None)
        self.activity.forget(job_id)
        self.stop_errors.pop(job_id, None)
        self.scheduler.release(job_id)
        self._release_dependents()
        row = self.jobs.get(job_id)
        self.hooks.on_exit(row)
        self.hooks.after_exit(row)
        self.pump()
