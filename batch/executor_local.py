"""The local executor of a batch's items (:class:`batch.executor.ItemExecutor`).

:class:`SupervisorExecutor` runs each item as a ``batch_item`` child of this
hermesd, in the pool ``batch:<job id>`` (``num_workers``) and under the global
``supervisor.max_children`` cap, through the runner's and the job table's public
calls only (never the scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batch.executor import ItemOutcome, ItemOwner, ItemRequest, SubmitError, guarded, item_spec
from hermesd import clock
from hermesd.contract.wire import JobResult
from hermesd.protocol import ProtocolError
from hermesd.store import StoreError
from hermesd.unwritable import RETRY_SECONDS


@dataclass
class _Live:
    owner: ItemOwner
    index: int
    delivered: bool = False


class SupervisorExecutor:
    """Items as ``batch_item`` children of this hermesd (``ctx``: its
    :class:`hermesd.context.Context`).  The batch plugin calls :meth:`on_result`
    and :meth:`on_exit` for ``batch_item`` jobs."""

    name = "local"

    def __init__(self, ctx: Any):
        self.d = ctx
        self.items: dict[str, _Live] = {}
        self._retries: dict[str, Any] = {}  # owner's job id → the timer of its next fill (see submit)

    @staticmethod
    def pool(owner: ItemOwner) -> str:
        """The scheduler pool of ``owner``'s items: ``batch:<job id>``."""
        return f"batch:{owner.job_id}"

    def open(self, owner: ItemOwner, workers: int) -> None:
        """Create (or resize) the owner's pool."""
        self.d.runner.open_pool(self.pool(owner), workers)

    def close(self, owner: ItemOwner, status: str | None = None) -> None:
        """Forget the owner's pool (queued items of it no longer wait for it)."""
        timer = self._retries.pop(owner.job_id, None)
        if timer is not None:
            timer.cancel()
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
        """Admit a ``batch_item`` job (parent: the batch) that starts when its pools have room.

        Raises :class:`SubmitError`: ``retry_later`` while the daemon shuts down, and while the
        state database cannot take the item's row (another process holds its write lock, the
        disk is full: a retryable ``StoreError``, :mod:`hermesd.unwritable`) — then the owner's
        ``fill`` runs again :data:`hermesd.unwritable.RETRY_SECONDS` later."""
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
        except StoreError as err:  # no row was written: no item will ever report for this prompt
            self.items.pop(handle, None)
            if err.retryable:
                self._fill_later(owner)
            raise SubmitError(str(err), retry_later=err.retryable) from None

    def _fill_later(self, owner: ItemOwner) -> None:
        """Call ``owner.fill`` once, :data:`RETRY_SECONDS` from now (unless a call is already timed):
        its prompts wait for the state database, and no item of theirs will end to call it."""
        if owner.job_id in self._retries:
            return

        def again() -> None:
            self._retries.pop(owner.job_id, None)
            guarded(owner.fill)

        self._retries[owner.job_id] = self.d.loop.call_later(RETRY_SECONDS, again)

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
