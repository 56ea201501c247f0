"""The notifications' state machine: a background delegation's completion, from stored to delivered.

::

    (stored) ──► pending ──► queued ──► delivered
       │            ▲           │           ▲
       │            └───────────┘           │
       └────────────────────────────────────┘  (no session: delivered by its event)

``pending``: waiting for its session to be idle; ``queued``: a delivery turn
(``turn``) carries it into the session; ``delivered``: in the session's history,
or told by its ``async_delegation`` event when it has no session.  A delivery
turn found gone at start-up puts it back to ``pending`` (delivered again, once).

Every state change goes through :meth:`Notifications._set`, checked against
:data:`TRANSITIONS` (an impossible one raises ``invalid_state``), inside the
caller's transaction — the job's terminal transition or the delivery turn's.
"""

from __future__ import annotations

from typing import Any

from hermesd import clock
from hermesd.protocol import ProtocolError
from hermesd.store import Store

PENDING, QUEUED, DELIVERED = "pending", "queued", "delivered"
STATES = (PENDING, QUEUED, DELIVERED)
TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({QUEUED, DELIVERED}),
    QUEUED: frozenset({DELIVERED, PENDING}),
    DELIVERED: frozenset(),
}
"""The checked edges; ``delivered`` is final.  A notification is stored ``pending`` (for a session)
or ``delivered`` (:meth:`Notifications.store_new`)."""

MIGRATIONS = {1: """
    CREATE TABLE notifications (
        job TEXT PRIMARY KEY,
        session TEXT,
        block TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        turn TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        delivered_at TEXT
    );
    CREATE INDEX notifications_state ON notifications(state);
    """}
"""The ``notifications`` table (schema version 1, :func:`hermesd.store.schema`)."""


class Notifications:
    """The ``notifications`` table (one row per background job: ``job``, ``session``,
    ``block``, ``state``, ``turn``, ``attempts``, ``created_at``, ``delivered_at``)."""

    def __init__(self, store: Store):
        self.store = store

    def get(self, job: str) -> dict[str, Any] | None:
        """The notification of ``job``, or None."""
        return self.store.one("SELECT * FROM notifications WHERE job = ?", (job,))

    def _set(self, job: str, state: str, **fields: Any) -> None:
        """Move the notification of ``job`` to ``state`` with extra column ``fields``; raises
        ``ProtocolError(invalid_state)`` for an edge :data:`TRANSITIONS` does not allow (or no such
        notification)."""
        row = self.get(job)
        previous = row["state"] if row else None
        if previous not in TRANSITIONS or state not in TRANSITIONS[previous]:
            raise ProtocolError("invalid_state", f"notification of {job} is {previous or 'not stored'} "
                                f"and cannot become {state}", {"job": job, "state": previous, "requested": state})
        if state == DELIVERED:
            fields["delivered_at"] = clock.now_iso()
        self.store.update("notifications", "job", job, {"state": state, **fields})

    def store_new(self, job: str, session: str | None, block: str) -> None:
        """Store the notification of ``job`` (inside its terminal transition): ``pending`` for a
        session, else ``delivered`` at once (its event is the delivery)."""
        now = clock.now_iso()
        self.store.insert("notifications", {
            "job": job, "session": session, "block": block, "created_at": now,
            "state": PENDING if session else DELIVERED, "delivered_at": None if session else now}, replace=True)

    def queue(self, job: str, turn: str, attempts: int) -> None:
        """``pending → queued``: delivery turn ``turn`` carries it (``attempts``: the turns so far)."""
        self._set(job, QUEUED, turn=turn, attempts=attempts)

    def requeue(self, job: str) -> None:
        """``queued → pending``: its delivery turn is gone (found at start-up)."""
        self._set(job, PENDING)

    def acknowledge(self, job: str) -> None:
        """``→ delivered`` (inside the transaction that stores the turn which delivered it)."""
        self._set(job, DELIVERED)

    def pending(self, session: str | None = None) -> list[dict[str, Any]]:
        """Undelivered notifications waiting for a turn, oldest first (of one session, or all)."""
        if session is None:
            return self.store.all("SELECT * FROM notifications WHERE state = ? ORDER BY created_at", (PENDING,))
        return self.store.all("SELECT * FROM notifications WHERE state = ? AND session = ? ORDER BY created_at",
                              (PENDING, session))

    def queued(self) -> list[dict[str, Any]]:
        """Notifications a delivery turn carries."""
        return self.store.all("SELECT * FROM notifications WHERE state = ?", (QUEUED,))

    def pending_count(self) -> int:
        """How many notifications are waiting for a turn (``status``: a count, not the rows)."""
        row = self.store.one("SELECT COUNT(*) AS n FROM notifications WHERE state = ?", (PENDING,))
        return int((row or {}).get("n") or 0)
