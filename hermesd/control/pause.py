"""The queue's pause switch (``hermesctl pause`` / ``resume``), durable across restarts.

While paused, no queued job starts (of any kind: delegations, session turns,
batch items, Kanban workers); running jobs go on.  Requests that would start a
job are still accepted: the job is written ``queued`` and waits, and the reply
says the queue is paused (``queue_paused: true``), so a script is never refused
for an operator's pause and nothing is lost.  The switch is a row of the
``settings`` table, so a restarted daemon stays paused.
"""

from __future__ import annotations

from hermesd import clock
from hermesd.store import Store

KEY = "queue.paused_at"


class QueuePause:
    """The pause switch of one daemon, read once from ``store`` and written through."""

    def __init__(self, store: Store):
        self.store = store
        row = store.one("SELECT value FROM settings WHERE key = ?", (KEY,))
        self.paused_at: str | None = row["value"] if row else None

    @property
    def paused(self) -> bool:
        """True while no queued job may start."""
        return self.paused_at is not None

    def pause(self) -> bool:
        """Pause (idempotent); returns whether this call changed the state.  Committed before it returns."""
        if self.paused:
            return False
        now = clock.now_iso()
        with self.store.transaction():
            self.store.insert("settings", {"key": KEY, "value": now}, replace=True)
        self.paused_at = now
        return True

    def resume(self) -> bool:
        """Resume (idempotent); returns whether this call changed the state.  The caller starts what fits."""
        if not self.paused:
            return False
        with self.store.transaction() as db:
            db.execute("DELETE FROM settings WHERE key = ?", (KEY,))
        self.paused_at = None
        return True

    def describe(self) -> dict[str, object]:
        """``{paused, paused_at}`` for ``status``."""
        return {"paused": self.paused, "paused_at": self.paused_at}
