"""The item runner of a batch, behind a small interface.

A batch run (:class:`batch.job.BatchRun`) knows nothing about processes: it
hands :class:`ItemRequest` objects to an :class:`ItemExecutor` and hears back,
per item, exactly once :meth:`ItemOwner.on_done` (how the prompt ended) and
then exactly once :meth:`ItemOwner.on_freed` (the item's worker slot is free
again).  Both may be called from inside :meth:`ItemExecutor.submit` (an item
that could not even start).

:class:`SupervisorExecutor` runs each item as a ``batch_item`` child of this
hermesd, in the pool ``batch:<job id>`` (``num_workers``) and under the global
``supervisor.max_children`` cap.  :class:`batch.executor_ray.RayExecutor`
(``--executor ray``) runs the same requests as Ray tasks and reports through
the same two callbacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from hermesd import clock
from hermesd.contract import JobResult
from hermesd.protocol import ProtocolError

log = logging.getLogger("hermesd.batch")


@dataclass(frozen=True)
class ItemRequest:
    """One prompt to run: its ``index`` and ``batch`` number, the ``prompt``,
    ``cwd`` (None: a scratch directory), ``toolsets``, ``model`` (None: the
    daemon's), ``max_turns``, ``reasoning_effort`` (None: the daemon's) and the
    scripted provider's ``script`` (None: none); batch_runner's ``max_tokens``,
    ``ephemeral_system_prompt``, ``prefill_messages``, ``provider`` and
    ``base_url`` (None: the daemon's / none); the container ``image``
    its terminal commands run in (None: the config's default); the ``verifier``
    run after the agent (``batch.verify.item_verifier``; None: none)."""

    index: int
    batch: int
    prompt: str
    cwd: str | None
    toolsets: list[str]
    model: str | None
    max_turns: int
    reasoning_effort: str | None
    script: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    ephemeral_system_prompt: str | None = None
    prefill_messages: list[dict[str, str]] | None = None
    provider: str | None = None
    base_url: str | None = None
    image: str | None = None
    verifier: dict[str, Any] | None = None


WORKDIR_PLACEHOLDER = "."
"""What a batch item's system prompt shows for its working directory (tools run
there), so the system turn is the same for every sample with the same tools."""

INVALID_TOOL_CALL_RETRIES = 3
"""Replies with invalid tool calls in a row that end a batch item as *partial*
(Hermes Agent's limit; see ``child.agent.Agent.loop``)."""

OPTIONAL_SPEC_KEYS = ("reasoning_effort", "script", "max_tokens", "ephemeral_system_prompt", "prefill_messages",
                      "provider", "base_url", "image", "verifier")
"""Request fields passed to the item's job spec when set."""


@dataclass(frozen=True)
class ItemOutcome:
    """How one item ended.

    ``status``: the child's status (``completed``, ``failed``, ``timed_out``,
    ``interrupted``…) or, when it reported nothing, its job's final state;
    ``result``: the child's result (with ``trajectory``) or None;
    ``error``: why it failed, or None; ``started_at``/``completed_at``: ISO 8601
    UTC; ``shutdown``: the executor was stopping when the item ended, so an
    unfinished item is not the prompt's failure; ``handle``: the item's id.
    """

    index: int
    status: str
    result: JobResult | None
    error: str | None
    started_at: str
    completed_at: str
    shutdown: bool
    handle: str


def item_spec(request: ItemRequest) -> dict[str, Any]:
    """What a ``batch_item`` job's ``spec`` adds to a child's spec for ``request``."""
    spec: dict[str, Any] = {"max_turns": request.max_turns, "record_trajectory": True,
                            "prompt_index": request.index, "batch": request.batch,
                            "workdir_placeholder": WORKDIR_PLACEHOLDER,
                            "invalid_tool_call_retries": INVALID_TOOL_CALL_RETRIES}
    for key in OPTIONAL_SPEC_KEYS:
        if getattr(request, key) is not None:
            spec[key] = getattr(request, key)
    return spec


class ItemOwner(Protocol):
    """What an executor reports to (a batch run): ``job_id`` (the batch job) and
    ``settings`` (its :class:`batch.settings.Settings`)."""

    job_id: str
    settings: Any

    def finish(self, status: str, error: str | None = None) -> None:
        """End the run (``failed`` with ``error`` when the executor cannot go on)."""

    def on_done(self, outcome: ItemOutcome) -> None:
        """The item of ``outcome.index`` ended."""

    def on_freed(self, index: int) -> None:
        """The worker slot of the item of ``index`` is free."""


class SubmitError(Exception):
    """An item could not be handed over; ``retry_later`` when the executor is stopping
    (the prompt is not at fault and stays pending)."""

    def __init__(self, message: str, *, retry_later: bool):
        super().__init__(message)
        self.retry_later = retry_later


class ItemExecutor(Protocol):
    """Runs the items of batch runs (see the module doc)."""

    name: str

    def open(self, owner: ItemOwner, workers: int) -> None:
        """Start serving ``owner`` with at most ``workers`` items at once."""

    def close(self, owner: ItemOwner) -> None:
        """Stop serving ``owner`` (its live items are left to :meth:`cancel_all`)."""

    def accepting(self) -> bool:
        """False once the executor is stopping: submit nothing more."""

    def ready(self) -> bool:
        """False while an item submitted now would start slower than one submitted a
        moment later; the executor then calls the owners' ``fill`` when it is ready."""

    def submit(self, owner: ItemOwner, request: ItemRequest) -> None:
        """Run ``request`` for ``owner``.  Raises :class:`SubmitError`."""

    def cancel_all(self, owner: ItemOwner, error: str | None = None) -> None:
        """Stop every live item of ``owner`` (their ``on_done``/``on_freed`` still follow);
        ``error``: why (their jobs' error; None: ``cancelled by request``)."""

    def waiting(self, owner: ItemOwner) -> int | None:
        """How many of the items handed over for ``owner`` have not started yet (they count as
        pending, not running); None: an executor that starts what it is handed at once."""

    def adopt(self, owner: ItemOwner, wanted: set[int]) -> set[int]:
        """Take back items of ``owner`` left waiting by an earlier daemon; returns
        their indices (items of indices not in ``wanted`` are cancelled)."""

    def describe(self, batch: str) -> dict[str, Any] | None:
        """Where the items of batch job ``batch`` run, for ``batch.status``: at least
        ``{name}``; None when the executor does not serve it now."""


@dataclass
class _Live:
    owner: ItemOwner
    index: int
    delivered: bool = False


def guarded(callback: Callable[[], None]) -> None:
    """Run an owner's callback from a runner hook: a bug in a batch must not break the
    lifecycle of the job that reported (the prompt then stays unsettled and runs on resume)."""
    try:
        callback()
    except Exception:  # noqa: BLE001
        log.exception("batch item callback failed")


class SupervisorExecutor:
    """Items as ``batch_item`` children of this hermesd (``ctx``: its
    :class:`hermesd.context.Context`).  The batch plugin calls :meth:`on_result`
    and :meth:`on_exit` for ``batch_item`` jobs."""

    name = "local"

    def __init__(self, ctx: Any):
        self.d = ctx
        self.items: dict[str, _Live] = {}

    @staticmethod
    def pool(owner: ItemOwner) -> str:
        """The scheduler pool of ``owner``'s items: ``batch:<job id>``."""
        return f"batch:{owner.job_id}"

    def open(self, owner: ItemOwner, workers: int) -> None:
        """Create (or resize) the owner's pool."""
        self.d.runner.open_pool(self.pool(owner), workers)

    def close(self, owner: ItemOwner) -> None:
        """Forget the owner's pool (queued items of it no longer wait for it)."""
        self.d.runner.close_pool(self.pool(owner))

    def accepting(self) -> bool:
        """False while the daemon shuts down."""
        return bool(self.d.runner.accepting)

    def ready(self) -> bool:
        """False while no warm start is at hand but one is on its way (``forkserver``: the
        zygote forks a spare in milliseconds; a cold start costs a whole interpreter's
        imports, on a machine the other items share): batch items start warm, in the
        order their slots came free, as spares arrive; the batch service refills every
        run when the runner says so (:meth:`hermesd.runner.Runner.warm_start_at_hand`)."""
        return self.d.runner.warm_start_at_hand()

    def submit(self, owner: ItemOwner, request: ItemRequest) -> None:
        """Admit a ``batch_item`` job (parent: the batch) that starts when its pools have room."""
        handle = self.d.jobs.new_id("batch_item")
        spec = item_spec(request)
        self.items[handle] = _Live(owner, request.index)
        try:
            self.d.runner.submit("batch_item", id=handle, pools=(self.pool(owner),), parent=owner.job_id,
                                 goal=request.prompt, cwd=request.cwd, toolsets=list(request.toolsets),
                                 model=request.model, spec=spec)
        except ProtocolError as err:
            self.items.pop(handle, None)
            raise SubmitError(err.message, retry_later=err.code == "shutting_down") from None

    def cancel_all(self, owner: ItemOwner, error: str | None = None) -> None:
        """Cancel every live item of ``owner`` (queued ones end at once), for ``error``."""
        for handle in [h for h, live in self.items.items() if live.owner is owner]:
            try:
                self.d.runner.stop(handle, "cancel", error)
            except ProtocolError:
                pass  # already terminal: its exit is on the way

    def waiting(self, owner: ItemOwner) -> None:
        """None: every item handed over counts as running (a child starts as soon as its pool and
        ``supervisor.max_children`` let it)."""
        return None

    def adopt(self, owner: ItemOwner, wanted: set[int]) -> set[int]:
        """Re-own the ``queued`` items of ``owner``'s job (kept queued over a restart):
        one per wanted index, back in the owner's pool; the others are cancelled."""
        adopted: set[int] = set()
        for row in self.d.jobs.list(statuses=("queued",), parent=owner.job_id, kinds=("batch_item",)):
            index = (row.get("spec") or {}).get("prompt_index")
            if index in wanted and index not in adopted:
                adopted.add(index)
                self.items[row["id"]] = _Live(owner, index)
                self.d.runner.requeue(row)  # its row's pool: the owner's (same job id)
            else:
                self.d.runner.cancel_queued(row["id"], "not needed when its batch resumed (prompt already settled)")
        return adopted

    def describe(self, batch: str) -> dict[str, Any]:
        """``{"name": "local"}``: items are children of this hermesd."""
        return {"name": self.name}

    def cancel_orphans(self, owners: set[str]) -> None:
        """Cancel ``queued`` batch items whose batch is not one of ``owners`` (job ids)."""
        for row in self.d.jobs.list(statuses=("queued",), kinds=("batch_item",)):
            if row.get("parent") not in owners and row["id"] not in self.items:
                self.d.runner.cancel_queued(row["id"], "its batch is no longer running")

    def on_result(self, row: dict[str, Any], result: JobResult) -> None:
        """A ``batch_item`` child reported: its owner hears how the prompt went."""
        live = self.items.get(row["id"])
        if live is None or live.delivered:
            return
        live.delivered = True
        guarded(lambda: live.owner.on_done(ItemOutcome(
            index=live.index, status=str(result.status or "failed"), result=result,
            error=result.error, started_at=row.get("started_at") or "", completed_at=clock.now_iso(),
            shutdown=not self.accepting(), handle=row["id"])))

    def on_exit(self, row: dict[str, Any] | None) -> None:
        """A ``batch_item`` job ended and was reaped: its owner hears it (if it did not
        report) and gets its worker back."""
        live = self.items.pop(row["id"], None) if row else None
        if live is None:
            return
        if not live.delivered:
            guarded(lambda: live.owner.on_done(ItemOutcome(
                index=live.index, status=row["status"], result=None, error=row.get("error"),
                started_at=row.get("started_at") or "", completed_at=row.get("completed_at") or clock.now_iso(),
                shutdown=not self.accepting(), handle=row["id"])))
        guarded(lambda: live.owner.on_freed(live.index))
