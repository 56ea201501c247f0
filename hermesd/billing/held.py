"""Spend that cannot be written now: held in memory, written again every second, never lost.

A ``spend`` record (:meth:`hermesd.billing.ledger.Ledger.record`) whose transaction
fails retryably (another process holds ``state.db``'s write lock, its disk is full
or read-only: :class:`hermesd.store.StoreError` ``retryable``) is held here, as a
job's end is (:mod:`hermesd.unwritable`), and written again every
:data:`hermesd.unwritable.RETRY_SECONDS` until it is:

* **in order**: while anything is held, a new record joins the back of the queue
  instead of being written past it; a retry writes from the front and stops at the
  first that still fails;
* **once**: each record has an identity (the job, its child's run, and the run's
  running totals after the record: ``calls`` and every token count), and a record
  already held is not held twice;
* **bounded**: at most :data:`MAX_HELD` records; one more fails as before (the
  request ``state_unavailable``) and the log says so;
* **counted**: a budget check (:meth:`Ledger.spent`) adds what is held in the
  budget's scope, so a held call still counts against its limits;
* **waited for**: a graceful stop waits up to :data:`STOP_WAIT_SECONDS` for the held
  records (``BillingPlugin.settling``), tries once more, and logs what could not be
  written (jobs, calls, tokens, cost) — lost from the bill.

``usage`` and ``ps`` show a held record once it is written (they read the database).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from hermesd.contract.tokens import TOKEN_KEYS
from hermesd.store import StoreError
from hermesd.unwritable import RETRY_SECONDS

log = logging.getLogger("hermesd")

MAX_HELD = 100_000
"""Records held at most (a few hundred bytes each)."""

STOP_WAIT_SECONDS = 10.0
"""How long a graceful stop waits for held records to be written, at most."""


@dataclass(frozen=True)
class Entry:
    """One ``spend`` record to write: ``key`` its identity (see the module doc), ``row`` the
    ``spend`` row (its ``time`` and ``day`` when it was reported), ``chain`` the job and its
    ancestors' ids (for the tree budgets)."""

    key: tuple[Any, ...]
    row: dict[str, Any]
    chain: tuple[str, ...]

    def within(self, scope: tuple[str, ...]) -> bool:
        """Whether the record counts in ``scope`` (a :attr:`hermesd.billing.ledger.Budget.scope`)."""
        if scope[0] == "day":
            return self.row["day"] == scope[1]
        if scope[0] == "session":
            return self.row["session"] == scope[1] and self.row["day"] == scope[2]
        return scope[1] in self.chain


class HeldSpend:
    """The held records (see the module doc); ``write(entry)`` writes one in its own transaction
    (raising :class:`StoreError`).  Runs on the event loop, whose timer retries."""

    def __init__(self, write: Callable[[Entry], None]):
        self.write = write
        self.held: dict[tuple[Any, ...], Entry] = {}  # in the order reported
        self._timer: asyncio.TimerHandle | None = None

    def put(self, entry: Entry) -> None:
        """Write ``entry`` now, or hold it when the database cannot take it (or others wait before
        it).  Raises the :class:`StoreError` when it is not retryable, when the queue is full, or
        off the event loop (nothing to retry it)."""
        if entry.key in self.held:
            return
        if not self.held:
            try:
                self.write(entry)
                return
            except StoreError as exc:
                self._hold(entry, exc)
                log.warning("%s: its usage cannot be written now, held and written as soon as it can: %s",
                            entry.row["job"], exc)
                return
        self._hold(entry, None)

    def _hold(self, entry: Entry, error: StoreError | None) -> None:
        if error is not None and not error.retryable:
            raise error
        if len(self.held) >= MAX_HELD:
            log.error("%s: usage not billed: %d records are held already (state.db cannot be written)",
                      entry.row["job"], len(self.held))
            raise error or StoreError(f"{len(self.held)} spend records wait for the state database", retryable=True)
        if self._timer is None:
            try:
                self._timer = asyncio.get_running_loop().call_later(RETRY_SECONDS, self.retry)
            except RuntimeError:
                if error is not None:
                    raise error from None
                raise
        self.held[entry.key] = entry

    def retry(self) -> None:
        """Timer: write the held records in order, up to the first that still fails (held again)."""
        self._timer = None
        self.flush()
        if self.held:
            self._timer = asyncio.get_running_loop().call_later(RETRY_SECONDS, self.retry)

    def flush(self) -> None:
        """Write the held records in order, stopping at the first that fails (it stays held)."""
        written = 0
        for key, entry in list(self.held.items()):
            try:
                self.write(entry)
            except StoreError:
                break
            del self.held[key]
            written += 1
        if written:
            log.info("%d held usage record(s) written%s", written,
                     f", {len(self.held)} still held" if self.held else "")

    def within(self, scope: tuple[str, ...]) -> Iterable[dict[str, Any]]:
        """The rows held in ``scope``."""
        return (e.row for e in self.held.values() if e.within(scope))

    def settling(self) -> float:
        """Seconds a graceful stop may wait for the held records: :data:`STOP_WAIT_SECONDS`, 0 when none."""
        return STOP_WAIT_SECONDS if self.held else 0.0

    def close(self) -> None:
        """The daemon stops: one last attempt, then log what is lost (jobs, calls, tokens, cost)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        if not self.held:
            return
        rows = [e.row for e in self.held.values()]
        tokens = {k: sum(r[k] for r in rows) for k in TOKEN_KEYS}
        log.error("usage lost from the bill: %d record(s) of job(s) %s could not be written to the state "
                  "database before the stop: %d call(s), %s, $%.6f", len(rows),
                  ", ".join(sorted({r["job"] for r in rows})), sum(r["calls"] for r in rows),
                  ", ".join(f"{tokens[k]} {k}" for k in TOKEN_KEYS), sum(r["cost_usd"] or 0.0 for r in rows))
        self.held.clear()
