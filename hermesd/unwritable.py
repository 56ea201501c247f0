"""When the state database cannot be written: nothing accepted is lost, nothing waits forever.

Two rules, for the time another process holds ``state.db``'s write lock, or its
disk is full or read-only (a :class:`hermesd.store.StoreError` that is
``retryable``):

* **A job's end is never forgotten.**  A terminal transition that cannot be
  written is held here (:class:`PendingEnds`) and written again every
  :data:`RETRY_SECONDS` until it is, with its terminal hooks (the completion
  notification, a session's messages) in the same transaction, as always.
  Meanwhile the job reads as ended (``job``, ``ps``, ``wait``): no job shows
  ``running`` without a process.  A daemon stopped before the end is written
  leaves the job ``running`` in the database; its journal (``hermesd.resume``)
  ends it at the next start without a model call.
* **A request waits a bounded time, then fails typed.**  A request whose write
  fails and that changed nothing yet (no commit of its own) is run again after a
  short pause, for up to :data:`WAIT_SECONDS`; then it fails with
  ``state_unavailable`` (``hermesctl`` exit 12), a message naming the database
  and the cause, and no traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from hermesd import clock
from hermesd.protocol import ProtocolError
from hermesd.store import StoreError

log = logging.getLogger("hermesd")

RETRY_SECONDS = 1.0
"""Seconds between two attempts to write the held ends."""

WAIT_SECONDS = 5.0
"""How long a request waits for the database to take its write, at most."""

FIRST_PAUSE, MAX_PAUSE = 0.05, 0.5
"""Seconds between two attempts of a request: doubling from the first to the most."""


class PendingEnds:
    """Terminal transitions written later (see the module doc): ``jobs`` the
    :class:`hermesd.jobs.JobTable` (it calls :meth:`hold` and :meth:`overlay`), ``loop`` the event loop."""

    def __init__(self, jobs: Any, loop: asyncio.AbstractEventLoop):
        self.jobs, self.loop = jobs, loop
        self.held: dict[str, tuple[str, dict[str, Any]]] = {}
        self._said: set[str] = set()  # the jobs whose held end the log told of
        self._timer: asyncio.TimerHandle | None = None

    def hold(self, row: dict[str, Any], status: str, fields: dict[str, Any], error: StoreError) -> dict[str, Any]:
        """Keep the end (``status`` and column ``fields``) of job ``row`` to write later; returns the row as it will be."""
        if row["id"] not in self._said:
            self._said.add(row["id"])
            log.warning("%s: its end (%s) cannot be written now, written as soon as it can: %s", row["id"], status, error)
        self.held[row["id"]] = (status, dict(fields))
        if self._timer is None:
            self._timer = self.loop.call_later(RETRY_SECONDS, self.retry)
        ended = self.overlay(row)
        self.jobs.wake(row["id"], ended)  # whoever waits for it is told now: nothing else can change it
        return ended

    def overlay(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` (a ``jobs`` row) with its held end, if any."""
        held = self.held.get(row["id"])
        return {**row, "status": held[0], **held[1]} if held else row

    def retry(self) -> None:
        """Timer: write every held end once more (one still failing is held again)."""
        self._timer = None
        for job_id, (status, fields) in list(self.held.items()):
            del self.held[job_id]
            self.jobs.transition(job_id, status, **fields)  # held again by the job table when it fails
            if job_id not in self.held:
                self._said.discard(job_id)
                log.info("%s: its end (%s) is written", job_id, status)


async def answer(store: Any, dispatch: Callable[[Any], Awaitable[Any]], request: Any) -> Any:
    """``await dispatch(request)``, run again while its write fails retryably and it committed
    nothing, for up to :data:`WAIT_SECONDS`.  Raises ``ProtocolError(state_unavailable)``
    instead of any :class:`StoreError`."""
    deadline, pause = clock.monotonic() + WAIT_SECONDS, FIRST_PAUSE
    while True:
        commits = store.commits
        try:
            return await dispatch(request)
        except StoreError as exc:
            changed = store.commits != commits
            if exc.retryable and not changed and clock.monotonic() + pause < deadline:
                await asyncio.sleep(pause)
                pause = min(MAX_PAUSE, pause * 2)
                continue
            what = ("it may have been done in part" if changed
                    else f"nothing was changed; try again{'' if not exc.retryable else ' later'}")
            raise ProtocolError("state_unavailable", f"{exc} (waited up to {WAIT_SECONDS:g}s): {what}",
                                {"retryable": exc.retryable}) from None
