"""Batch items on a Ray cluster, the daemon's side (``--executor ray``).  Never imports Ray.

:class:`RayExecutor` is the :class:`batch.executor.ItemExecutor` of runs
whose ``executor`` is ``ray``.  Per batch it keeps one driver
(:mod:`child.ray_driver`) running as a ``batch_driver`` child of hermesd
(parent: the batch job), and talks to it through ``child.batch_sync``: the
driver reports the items that ended and the cluster (nodes, CPUs); the reply
hands it the items to start and to cancel, or tells it to stop.  The batch run
(:class:`batch.job.BatchRun`) stays the single writer of the batch files and
the checkpoint; the driver only carries items to the cluster and outcomes back.

Exactly once.  Each attempt of a prompt has its own handle (a fresh
``ray_item`` id); an outcome counts only when its handle is the live attempt
of its prompt index, so a report repeated, a Ray retry's second result, or a
report from a driver since replaced is dropped, and each prompt is recorded
once.

Items are jobs.  Each attempt handed to a driver is a ``ray_item`` row (parent:
the batch; a kind without a process here): ``queued`` until its first report
comes through the driver (``child.batch_relay``: it is up on a worker), then
``running``, and ended once, by :meth:`RayExecutor._deliver`, with its outcome.
What it relays is answered as for a local child: its model calls ask the
daemon's governor and are billed to it (so ``usage``, ``batch status`` and
``statistics.json`` count them), its progress is its activity, so the runner's
stale rule stops a quiet item (:meth:`RayExecutor.stop_item`, as ``cancel``
does), and ``ps`` and ``top`` show it.

Failures.  A driver that dies while its batch runs (``kill -9``, the cluster
lost) is started again after :data:`RESTART_DELAYS` and is handed every
unfinished item again (new attempts, new handles; those sent to the dead driver end
``lost``); an item whose host was lost comes back ``lost`` and its prompt goes again
the same way, :data:`MAX_ATTEMPTS` times at most; :data:`MAX_FAILURES` deaths
in a row without an outcome in between end the batch ``failed`` with the
driver's last error.  When hermesd itself dies the driver dies with it (its
lifeline), Ray ends the driver's tasks, and the restarted daemon resumes the
batch from its files with a new driver.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from dataclasses import dataclass, field
from typing import Any

from batch import ray_pool
from batch.executor import ItemOutcome, ItemOwner, ItemRequest, SubmitError, guarded, item_spec
from batch.ray_pool import Pool
from batch.settings import Settings
from hermesd import clock, private
from hermesd.billing import ops as billing
from hermesd.contract.states import STOP_REASONS, TERMINAL, JobStatus, exit_reason_of
from hermesd.contract.wire import JobResult
from hermesd.protocol import ProtocolError
from hermesd.upkeep.retention import Retention

log = logging.getLogger("hermesd.batch")

KIND = "batch_driver"
ITEM_KIND = "ray_item"
CONNECT_SECONDS = 60.0
"""How long ``batch.run`` waits for a new driver to join the cluster before it gives up."""
RESTART_DELAYS = (0.5, 2.0, 5.0)
"""Seconds before a dead driver is started again: after the 1st, 2nd, later deaths in a row."""
MAX_FAILURES = 5
MAX_ATTEMPTS = 4
"""A prompt whose item's host was lost (its node or its process) goes again as a new item; the
:data:`MAX_ATTEMPTS`-th attempt lost fails the prompt (``--resume`` runs it again)."""
CLUSTER_KEYS = ("address", "nodes", "cpus", "cpus_free", "fits", "shapes")
"""What a driver's sync says of its cluster (:func:`child.ray_driver.cluster`), and ``batch.status`` shows."""
STOP_SECONDS = 10.0
"""How long past the supervisor's grace a driver told to stop may take before it is cancelled."""
DRIVER_TIMEOUT_SECONDS = 10 * 365 * 86400.0
"""A driver lives as long as its batch: no wall-clock limit."""


def ray_installed() -> bool:
    """Whether hermesd's Python can import Ray (looked up, not imported)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def no_room(settings: Settings, cluster: dict[str, Any]) -> tuple[str, str]:
    """``(field, error)`` for a cluster none of whose nodes can hold one item of ``settings``
    (its ``fits`` is false): the reservation at fault (``ray_num_cpus`` when no node has the
    CPUs, else ``ray_memory_mb``), and the nodes' sizes (its ``shapes``)."""
    cpus, memory = settings.ray_num_cpus, settings.ray_memory_mb or 0
    shapes = [(float(c), int(m)) for c, m in cluster.get("shapes") or []]
    field = "ray_num_cpus" if not any(c >= cpus for c, _ in shapes) else "ray_memory_mb"
    if field == "ray_num_cpus" and memory and not any(m >= memory for _, m in shapes):
        advice = "lower --ray_num_cpus and --ray_memory_mb (batch.ray_num_cpus, batch.ray_memory_mb)"
    else:
        advice = f"lower --{field} (batch.{field})"
    each = f"{cpus:g} CPU(s)" + (f" and {memory} MiB" if memory else "")
    sizes = "; ".join(f"{c:g} CPU(s) and {m} MiB" for c, m in shapes) or "none"
    return field, (f"no node of the Ray cluster at {settings.cluster} can hold an item "
                   f"({each} each; its largest nodes have {sizes}): {advice}")


class DriverFailed(Exception):
    """The driver ended before it joined the cluster; the message is its error."""


@dataclass
class _Item:
    index: int
    spec: dict[str, Any]
    row: dict[str, Any]
    attempts: int = 1  # of its prompt whose host was lost, this one included
    sent: bool = False
    created: bool = False  # its ray_item row is written (when first handed to a driver)
    up: bool = False  # it reported through the driver: its row is running


@dataclass
class _Driver:
    """A driver and the items (by handle) of batch ``batch``, the one it serves (None: idle in
    the pool, :mod:`batch.ray_pool`); ``key``: what it is made for (:func:`batch.ray_pool.key`)."""

    batch: str | None
    settings: Settings
    ready: asyncio.Future
    key: tuple[Any, ...]
    owner: ItemOwner | None = None
    job: str | None = None
    cluster: dict[str, Any] | None = None
    items: dict[str, _Item] = field(default_factory=dict)
    cancel: list[str] = field(default_factory=list)
    failures: int = 0
    starts: int = 0
    ended: str | None = None  # the job of its last process that ended
    closing: bool = False
    timer: Any = None
    refused: bool = False  # it looked for a run that was refused: its job is forgotten once it ends
    warm: bool = False  # its batch took it from the pool, its hosts up


class RayExecutor:
    """Items as Ray tasks through a supervised driver per batch (``ctx``: the daemon's
    :class:`hermesd.context.Context`).  The batch plugin calls :meth:`on_exit` for
    its process jobs (``batch_driver`` ones are this executor's)."""

    name = "ray"

    def __init__(self, ctx: Any):
        self.d = ctx
        self.drivers: dict[str, _Driver] = {}  # batch job id -> its driver
        self.by_job: dict[str, _Driver] = {}  # driver job id -> its driver
        self.pool = Pool(ctx.loop)  # the idle drivers

    # the driver process ----------------------------------------------------

    def _driver(self, batch: str, settings: Settings) -> _Driver:
        """The driver of ``batch``: its own, else an idle one made for its settings, else a new one
        (the idle ones on its cluster ended first: they hold room it may need)."""
        drv = self.drivers.get(batch)
        if drv is not None:
            return drv
        key = ray_pool.key(settings, self.d.config.supervisor.interrupt_grace_seconds)
        drv = self.pool.take(key)
        if drv is not None:
            drv.batch, drv.settings, drv.warm, drv.starts, drv.failures = batch, settings, True, 0, 0
            guarded(lambda: self.d.jobs.update(drv.job, parent=batch))
        else:
            for idle in self.pool.on(key[0]):
                self._stop(idle)
            drv = _Driver(batch, settings, self.d.loop.create_future(), key)
        self.drivers[batch] = drv
        if drv.job is None:
            self._start(drv)
        return drv

    def _start(self, drv: _Driver) -> None:
        drv.timer = None
        if drv.closing or drv.job is not None or self.drivers.get(drv.batch) is not drv:
            return
        address, num_cpus, memory_mb, grace = drv.key
        ray = {"address": address, "num_cpus": num_cpus, "memory_mb": memory_mb, "grace": grace}
        drv.starts += 1
        self._again(drv)
        try:
            row = self.d.runner.submit(KIND, parent=drv.batch, goal=f"Ray driver on {drv.settings.cluster}",
                                       toolsets=[], spec={"timeout_seconds": DRIVER_TIMEOUT_SECONDS, "ray": ray})
        except ProtocolError as err:
            self._failed(drv, err.message)
            return
        drv.job = row["id"]
        self.by_job[row["id"]] = drv

    def _again(self, drv: _Driver) -> None:
        """A new driver knows nothing: every unfinished item goes to it again.  An item the dead
        driver had sent ended with it (its host's items die with their driver): its row ends
        ``lost`` and its prompt goes again as a new attempt, with a new handle."""
        items: dict[str, _Item] = {}
        for handle, item in drv.items.items():
            if item.sent:
                item = self._retry(handle, item, "lost: its Ray driver ended", item.attempts)
            items[item.row["id"]] = item
        drv.items = items

    def _retry(self, handle: str, item: _Item, error: str, attempts: int) -> _Item:
        """End attempt ``handle`` (``item``) ``lost`` with ``error``; returns its prompt's next
        attempt (a new handle, not sent yet), the ``attempts``-th whose host was lost."""
        if item.created:
            guarded(lambda: self._end_row(handle, JobStatus.LOST, None, error, None))
            self.d.runner.ended(handle)
        return self._item(item.index, {**item.row, "id": self.d.jobs.new_id(ITEM_KIND)}, attempts)

    def _item(self, index: int, row: dict[str, Any], attempts: int = 1) -> _Item:
        """The attempt ``row`` (a ``ray_item`` row not written yet) at prompt ``index``, with its spec."""
        spec = self.d.runner.child_spec(row)
        spec["cwd"] = row["cwd"]  # None: a scratch directory on the worker
        return _Item(index, spec, row, attempts)

    def _failed(self, drv: _Driver, error: str) -> None:
        """The driver is gone (or could not start): fail the connect, restart, or give up."""
        if not drv.ready.done():
            drv.ready.set_exception(DriverFailed(error))
            drv.ready.exception()  # retrieved: nobody may be waiting
        if drv.closing or self.drivers.get(drv.batch) is not drv:
            return
        if not self.accepting():  # hermesd stops: the batch resumes from its files at the next start
            for handle in list(drv.items):
                self._deliver(drv, handle, status="interrupted", error="hermesd shut down", shutdown=True)
            return
        if drv.owner is None:  # only a connect was waiting
            self.discard(drv.batch)
            return
        drv.failures += 1
        if drv.failures >= MAX_FAILURES:
            owner = drv.owner
            guarded(lambda: owner.finish("failed", f"the Ray driver of this batch ended {drv.failures} times in a "
                                                   f"row without a result; the last time: {error}"))
            return
        delay = RESTART_DELAYS[min(drv.failures, len(RESTART_DELAYS)) - 1]
        log.warning("Ray driver of %s ended (%s); starting it again in %.1f s", drv.batch, error, delay)
        drv.timer = self.d.loop.call_later(delay, self._start, drv)

    def on_exit(self, row: dict[str, Any] | None) -> None:
        """A job ended and was reaped: when it was a driver of a live batch, start it again or give
        up; an idle one leaves the pool."""
        drv = self.by_job.pop(row["id"], None) if row else None
        if drv is None:
            return
        drv.job, drv.ended = None, row["id"]
        if drv.refused:
            self._forget(row["id"])
        if self.pool.drop(drv):
            log.info("idle Ray driver %s ended %s", row["id"], row["status"])
            return
        self._failed(drv, row.get("error") or f"the driver ended {row['status']}")

    def _forget(self, job: str) -> None:
        """Remove the ended driver ``job`` that looked for a refused run (its row and folder, as
        retention does): the refusal was the answer, and repeated tries leave nothing behind."""
        try:
            retention = self.d.service(Retention)
        except KeyError:  # no upkeep plugin: the row stays, as any ended job's
            return

        def remove() -> None:  # after the other exit hooks have seen it
            guarded(lambda: retention.remove_jobs([job]))
            self.d.loop.run_in_executor(None, retention.remove_folder, job)

        self.d.loop.call_soon(remove)

    async def connect(self, batch: str, settings: Settings) -> dict[str, Any]:
        """Start the driver of ``batch`` and wait until it has joined the cluster; returns
        the cluster (:data:`CLUSTER_KEYS`).  Raises ``ProtocolError`` (``bad_request``; field
        ``executor``: Ray not installed, the cluster unreachable, or no answer within
        :data:`CONNECT_SECONDS`; field ``ray_num_cpus`` or ``ray_memory_mb``: no node of the
        cluster could hold one item, :func:`no_room`)."""
        if not ray_installed():
            raise ProtocolError("bad_request", "--executor ray: Ray is not installed for hermesd's Python: "
                                "pip install 'hermesd[ray]' (then restart hermesd)", {"field": "executor"})
        drv = self._driver(batch, settings)
        field = "executor"
        try:
            cluster = drv.cluster or await asyncio.wait_for(asyncio.shield(drv.ready), CONNECT_SECONDS)
            if cluster.get("fits") is not False:
                return cluster
            field, error = no_room(settings, cluster)
        except asyncio.TimeoutError:
            error = (f"the Ray cluster at {settings.cluster} did not answer within "
                     f"{CONNECT_SECONDS:.0f} s")
        except DriverFailed as exc:
            error = str(exc).removeprefix("DriverError: ")
        if drv.owner is None:
            self.discard(batch)
        raise ProtocolError("bad_request", f"--executor ray: {error}", {"field": field})

    def discard(self, batch: str) -> None:
        """Let go of the driver of ``batch`` if no run owns it (a ``batch.run`` refused after it
        connected, or while it did): one that joined a cluster with room goes idle into the pool
        (the run was refused for something else); any other is stopped, and its job forgotten
        once it has ended (:meth:`_forget`)."""
        drv = self.drivers.get(batch)
        if drv is None or drv.owner is not None:
            return
        if self._usable(drv):
            self._park(drv)
            return
        drv.refused = True
        if drv.job is None and drv.ended:
            self._forget(drv.ended)
        self._stop(drv)

    @staticmethod
    def _usable(drv: _Driver) -> bool:
        """Whether ``drv`` runs, has joined its cluster, and found room there for an item."""
        joined = drv.ready.done() and drv.ready.exception() is None
        return drv.job is not None and joined and not drv.closing and (drv.cluster or {}).get("fits") is not False

    def _park(self, drv: _Driver) -> None:
        """Its batch is done with ``drv``: idle into the pool for ``ray.idle_seconds`` (its hosts
        kept), or stopped when there is no pool (0), it is not usable, or hermesd stops."""
        idle = float(self.d.config.ray.idle_seconds)
        if not idle or not self._usable(drv) or not self.accepting():
            self._stop(drv)
            return
        if self.drivers.get(drv.batch) is drv:
            del self.drivers[drv.batch]
        drv.batch, drv.owner = None, None
        self.pool.put(drv, idle, self._stop)

    def _stop(self, drv: _Driver) -> None:
        """End the driver: one that has joined its cluster is told ``stop`` at its next sync (it
        stops the items it still runs and ends ``completed``), and cancelled only if it has not
        ended :data:`STOP_SECONDS` after the supervisor's grace; any other is cancelled now."""
        drv.closing = True
        if self.drivers.get(drv.batch) is drv:
            del self.drivers[drv.batch]
        self.pool.drop(drv)
        if drv.timer is not None:
            drv.timer.cancel()
        joined = drv.ready.done() and drv.ready.exception() is None
        if drv.job is not None and joined:
            grace = self.d.config.supervisor.interrupt_grace_seconds
            drv.timer = self.d.loop.call_later(grace + STOP_SECONDS, self._cancel, drv)
        else:
            self._cancel(drv)

    def _cancel(self, drv: _Driver) -> None:
        if drv.job is not None:
            try:
                self.d.runner.stop(drv.job, "cancel")
            except ProtocolError:
                pass  # already ending

    def cancel_orphans(self) -> None:
        """Restart: cancel ``queued`` drivers and items an earlier daemon left (each live batch
        starts its own driver, and hands it new attempts)."""
        for row in self.d.jobs.list(statuses=("queued",), kinds=(KIND, ITEM_KIND)):
            if row["id"] not in self.by_job and not any(row["id"] in d.items for d in self.drivers.values()):
                self.d.runner.cancel_queued(row["id"], "a driver of an earlier hermesd: the batch has a new one"
                                            if row["kind"] == KIND else "its Ray driver ended with an earlier hermesd")

    # the ItemExecutor interface ------------------------------------------------

    def open(self, owner: ItemOwner, workers: int) -> None:
        """Own the batch's driver (started now unless a connect started it)."""
        self._driver(owner.job_id, owner.settings).owner = owner

    def close(self, owner: ItemOwner, status: str | None = None) -> None:
        """The run ended ``status``: its driver (which cancels the tasks it still has) goes idle into
        the pool (:mod:`batch.ray_pool`), or is stopped when the run was ``cancelled``."""
        drv = self.drivers.get(owner.job_id)
        if drv is not None and drv.owner is owner:
            (self._stop if status == JobStatus.CANCELLED else self._park)(drv)

    def accepting(self) -> bool:
        """False while the daemon shuts down."""
        return bool(self.d.runner.accepting)

    def ready(self) -> bool:
        """Always: the driver's cluster starts the items."""
        return True

    def submit(self, owner: ItemOwner, request: ItemRequest) -> None:
        """Queue ``request`` for the driver: it goes out with the reply to its next sync."""
        drv = self.drivers.get(owner.job_id)
        if drv is None or drv.owner is not owner:
            raise SubmitError("the batch has no Ray driver", retry_later=True)
        handle = self.d.jobs.new_id(ITEM_KIND)
        drv.items[handle] = self._item(request.index, {
            "id": handle, "kind": ITEM_KIND, "goal": request.prompt, "toolsets": list(request.toolsets),
            "model": request.model, "parent": owner.job_id, "spec": item_spec(request), "cwd": request.cwd})

    def cancel_all(self, owner: ItemOwner, error: str | None = None) -> None:
        """End every live item of ``owner`` now, for ``error`` (None: ``cancelled by request``):
        ``cancelled``, and the driver cancels their tasks at its next sync; those handed to a
        driver that has died meanwhile end ``lost`` (they died with it)."""
        drv = self.drivers.get(owner.job_id)
        if drv is None:
            return
        error = error or STOP_REASONS["cancel"].error
        for handle, item in list(drv.items.items()):
            gone = item.sent and drv.job is None  # it died with its driver
            if item.sent and not gone:
                drv.cancel.append(handle)
            self._deliver(drv, handle, status=JobStatus.LOST if gone else JobStatus.CANCELLED,
                          error=f"lost: its Ray driver ended; {error}" if gone else error, shutdown=not self.accepting())

    def waiting(self, owner: ItemOwner) -> int:
        """The items of ``owner`` no host has started yet: waiting for a slot, or handed to a host
        and not yet reported through the driver."""
        drv = self.drivers.get(owner.job_id)
        return sum(1 for item in drv.items.values() if not item.up) if drv is not None else 0

    def adopt(self, owner: ItemOwner, wanted: set[int]) -> set[int]:
        """Nothing to take back: the tasks of an earlier daemon's driver ended with it."""
        return set()

    def describe(self, batch: str) -> dict[str, Any] | None:
        """``{name: "ray", driver, driver_starts, warm, in_flight, waiting}`` and the cluster as the
        driver last saw it (:data:`CLUSTER_KEYS`) for a live batch, else None; ``warm``: its
        driver came from the pool; ``waiting`` says why its items wait while no node can hold one
        (:func:`no_room`), else None."""
        drv = self.drivers.get(batch)
        if drv is None:
            return None
        cluster = drv.cluster or {}
        return {"name": self.name, "address": drv.settings.ray_address, **cluster, "driver": drv.job,
                "driver_starts": drv.starts, "warm": drv.warm, "in_flight": sum(1 for i in drv.items.values() if i.sent),
                "waiting": no_room(drv.settings, cluster)[1] if cluster.get("fits") is False else None}

    # the driver's reports --------------------------------------------------------

    def _deliver(self, drv: _Driver, handle: str, *, status: str, result: JobResult | None = None,
                 error: str | None = None, started_at: str = "", completed_at: str = "", shutdown: bool = False,
                 stop_reason: str | None = None, log_text: str | None = None) -> None:
        item = drv.items.pop(handle)
        if item.created and log_text:
            guarded(lambda: self._keep_log(handle, log_text))
        if item.created:
            guarded(lambda: self._end_row(handle, status, result, error, stop_reason))
        owner = drv.owner
        if owner is not None:
            now = clock.now_iso()
            guarded(lambda: owner.on_done(ItemOutcome(
                index=item.index, status=status, result=result, error=error, started_at=started_at or now,
                completed_at=completed_at or now, shutdown=shutdown, handle=handle)))
            guarded(lambda: owner.on_freed(item.index))
        if item.created:
            self.d.runner.ended(handle)

    def _keep_log(self, handle: str, text: str) -> None:
        """The end of item ``handle``'s log, brought back by its driver, as its job's log
        (``jobs/ID/log``, 0600, as a local child's): ``hermesctl logs`` prints it."""
        path = self.d.runner.log_path(handle)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private.write_file(path, text)

    def _end_row(self, handle: str, status: str, result: JobResult | None, error: str | None,
                 stop_reason: str | None) -> None:
        """The item's row: its terminal state, with what its child reported (as
        :meth:`hermesd.runner.Runner` ends a local child's)."""
        row = self.d.jobs.get(handle)
        if row is None or row["status"] in TERMINAL:
            return
        status = status if status in TERMINAL else JobStatus.FAILED
        if row["status"] == JobStatus.QUEUED and status not in (JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.LOST):
            row = self.d.jobs.transition(handle, JobStatus.RUNNING)  # it ran, though nothing came through
        stop = STOP_REASONS.get(stop_reason or "")
        result = result or JobResult()
        tokens = result.tokens or {}
        self.d.jobs.transition(
            handle, status, exit_reason=(stop.exit_reason if stop is not None else None) or result.exit_reason
            or exit_reason_of(status), error=error, stop_reason=stop_reason,
            summary=result.summary, api_calls=int(result.api_calls or row.get("api_calls") or 0),
            tokens_in=int(tokens.get("input") or row.get("tokens_in") or 0),
            tokens_out=int(tokens.get("output") or row.get("tokens_out") or 0), trace=result.trace or [],
            model=row.get("model") or result.model, provider=row.get("provider") or result.provider,
            duration_seconds=result.duration_seconds)

    def _owner_of(self, handle: str) -> _Driver | None:
        return next((d for d in self.drivers.values() if handle in d.items), None)

    def stop_item(self, row: dict[str, Any], reason: str) -> None:
        """Stop item ``row`` (a ``ray_item`` job) for ``reason`` (``cancel``, ``stale``…): its
        driver cancels its task at its next sync and it ends now, as the reason says (the
        runner's stop error, when it gave one).  An item no driver holds just ends."""
        stop = STOP_REASONS.get(reason)
        status = stop.status if stop is not None and stop.status is not None else JobStatus.CANCELLED
        error = self.d.runner.stop_errors.get(row["id"]) or (stop.error if stop is not None else reason)
        drv = self._owner_of(row["id"])
        if drv is None:
            guarded(lambda: self._end_row(row["id"], status, None, error, reason))
            self.d.runner.ended(row["id"])
            return
        if drv.items[row["id"]].sent:
            drv.cancel.append(row["id"])
        self._deliver(drv, row["id"], status=status, error=error, shutdown=not self.accepting(), stop_reason=reason)

    def relayed(self, job: str, handle: str) -> None:
        """Driver ``job`` relays a message of item ``handle`` (``child.batch_relay``): the item
        is up (its row goes ``running`` at the first).  Raises ``not_found`` when the item is
        not a live one of that driver."""
        drv = self.by_job.get(job)
        item = drv.items.get(handle) if drv is not None else None
        if item is None or not item.sent or not item.created:
            raise ProtocolError("not_found", f"no live item {handle} of driver {job}", {"job": handle})
        if not item.up:
            item.up = True
            self.d.jobs.transition(handle, JobStatus.RUNNING)

    def on_sync(self, job: str, args: dict[str, Any]) -> dict[str, Any]:
        """``child.batch_sync`` of driver ``job``: record its outcomes (each live attempt
        once; others dropped) and cluster; returns ``{run: [{handle, index, spec}],
        cancel: [handle], stop: bool, keep: bool}`` (``keep``: it is idle in the pool, its
        hosts are kept)."""
        drv = self.by_job.get(job)
        if drv is None or drv.closing:
            return {"run": [], "cancel": [], "stop": True, "keep": False}
        if isinstance(args.get("cluster"), dict):
            drv.cluster = {k: args["cluster"].get(k) for k in CLUSTER_KEYS}
            if not drv.ready.done():
                drv.ready.set_result(drv.cluster)
        for o in args.get("outcomes") or []:
            item = drv.items.get(o.get("handle")) if isinstance(o, dict) else None
            if item is None or not item.sent or item.index != o.get("index"):
                log.info("dropped a stale or repeated outcome from %s: %s", job, o.get("handle"))
                continue
            drv.failures = 0
            if o.get("status") == JobStatus.LOST and item.attempts < MAX_ATTEMPTS:  # its host was lost: again
                again = self._retry(o["handle"], drv.items.pop(o["handle"]), str(o.get("error") or "lost"),
                                    item.attempts + 1)
                drv.items[again.row["id"]] = again
                continue
            if o.get("status") == JobStatus.LOST:
                o = {**o, "status": JobStatus.FAILED, "error": f"{o.get('error')} (the {MAX_ATTEMPTS}th attempt)"}
            stamp = [clock.iso(o[k]) if isinstance(o.get(k), (int, float)) else "" for k in ("started_at", "completed_at")]
            result = JobResult.from_wire(o["result"]) if isinstance(o.get("result"), dict) else None
            if result is not None:  # what its relayed calls did not settle yet is billed now, once
                guarded(lambda: billing.observe(self.d, o["handle"], {
                    "tokens": result.tokens, "api_calls": result.api_calls, "provider": result.provider,
                    "model": result.model}, final=True))
            self._deliver(drv, o["handle"], status=str(o.get("status") or "failed"), result=result,
                          error=o.get("error"), started_at=stamp[0], completed_at=stamp[1],
                          shutdown=not self.accepting(), log_text=o.get("log") if isinstance(o.get("log"), str) else None)
            if self.drivers.get(drv.batch) is not drv:
                break  # the run ended inside that outcome
        run = []
        with self.d.store.transaction():  # the rows of the items handed out: one commit
            for handle, item in drv.items.items():
                if not item.sent:
                    item.sent = True
                    if not item.created:
                        item.created = True
                        self.d.jobs.create(ITEM_KIND, **{k: v for k, v in item.row.items() if k != "kind"})
                    run.append({"handle": handle, "index": item.index, "spec": item.spec})
        cancel, drv.cancel = drv.cancel, []
        return {"run": run, "cancel": cancel, "stop": drv.closing, "keep": drv.batch is None}
