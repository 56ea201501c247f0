"""Events: persist, then publish.

Every event gets a strictly increasing ``seq`` from the ``events`` table and is
committed before it is sent on ``events.sock``.  Durable events (transitions,
completions) are committed one by one with fsync; high-rate ``job.progress``
events are group-committed every :data:`FLUSH_SECONDS`, so an fsync per token
never limits throughput.  Order is kept: a durable event first flushes the
buffer of non-durable ones.

A client that reconnects calls ``events_since(seq)`` and loses nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any, Callable

from hermesd import clock, protocol
from hermesd.protocol import INT64_MAX
from hermesd.store import Store, StoreError


CORE_EVENTS: dict[str, str] = {
    "job.queued": "A job was created. `data.job`: its record.",
    "job.state": "A job changed state. `data`: `status`, `previous`, `job` (the record after the change).",
    "job.progress": "A running child reported a step: `turn`, `tool`, `activity`, `api_calls`, `tokens`, `text`, "
    "`cost_usd` and `cost_unknown` (its cost so far, with `tokens`) "
    "(group-committed, not fsynced one by one).",
    "daemon.started": "The daemon is up and ready. `data`: `pid`, `version`.",
    "daemon.stopped": "The daemon finished its graceful stop. `data`: `pid`.",
    "daemon.reloaded": "The config file was re-read. `data`: `source` (its path), `restart_needed` (changed keys "
                       "in force only after a restart).",
    "daemon.reload_failed": "A reload was refused; the running config is kept. `data`: `error`, `file`, "
    "`line`, `key`, `reason`.",
}
"""The meanings of the core's event types (``docs/protocol.md``); each plugin declares its own
(:attr:`hermesd.plugin.Plugin.events`)."""

FLUSH_SECONDS = 0.05
Publisher = Callable[[list[bytes]], None]
Listener = Callable[[dict[str, Any]], None]


def _wire(row: dict[str, Any]) -> dict[str, Any]:
    return {"v": protocol.PROTOCOL_VERSION, "seq": row["seq"], "type": row["type"], "time": row["time"],
            "job": row["job"], "session": row["session"], "data": row["data"]}


class EventLog:
    """Append-then-publish event log over a :class:`Store`.

    ``publish`` sends PUB frames (must never block); ``listeners`` are in-process
    callbacks run after publishing (e.g. waiters and the delivery of notifications);
    ``flush_hooks`` run inside each group commit, before its events are inserted
    (writes that may lag as the buffered events do, e.g. progress counters).
    """

    def __init__(self, store: Store, publish: Publisher | None = None):
        self.store = store
        self.publish = publish or (lambda frames: None)
        self.listeners: list[Listener] = []
        self.flush_hooks: list[Callable[[], None]] = []
        self._buffer: list[dict[str, Any]] = []
        self._flush_handle: asyncio.TimerHandle | None = None

    def _insert(self, etype: str, job: str | None, session: str | None, data: dict[str, Any]) -> dict[str, Any]:
        row = {"type": etype, "time": clock.now_iso(), "job": job, "session": session, "data": data}
        row["seq"] = self.store.insert("events", row)
        return _wire(row)

    def record(self, etype: str, *, job: str | None = None, session: str | None = None,
               data: dict[str, Any] | None = None) -> dict[str, Any]:
        """Insert an event inside the caller's transaction; the caller publishes it after commit.

        Returns the wire event (with ``seq``).
        """
        self.flush()
        return self._insert(etype, job, session, data or {})

    def emit(self, etype: str, *, job: str | None = None, session: str | None = None,
             data: dict[str, Any] | None = None, durable: bool = True) -> dict[str, Any] | None:
        """Persist and publish one event.

        ``durable=False`` buffers it for a group commit (returns None); durable
        events are committed (fsync) before this returns the wire event.
        """
        if not durable:
            self._buffer.append({"type": etype, "job": job, "session": session, "data": data or {},
                                 "time": clock.now_iso()})
            self._schedule_flush()
            return None
        event = self.record(etype, job=job, session=session, data=data)
        self.send_after_commit([event])  # at once, unless the caller's transaction is still open
        return event

    def _schedule_flush(self) -> None:
        if self._flush_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flush_handle = loop.call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        """Commit buffered non-durable events in one transaction, then publish them.  While the
        database cannot take the write (a ``retryable`` :class:`StoreError`) they stay buffered for
        the next group commit; inside an outer transaction the error is the outer one's."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._buffer:
            return
        pending, self._buffer = self._buffer, []
        try:
            with self.store.transaction():
                for hook in self.flush_hooks:
                    hook()
                events = []
                for row in pending:
                    row["seq"] = self.store.insert("events", {k: row[k] for k in ("type", "time", "job", "session", "data")})
                    events.append(_wire(row))
                self.send_after_commit(events)
        except (StoreError, sqlite3.Error) as exc:
            self._buffer = pending + self._buffer
            if not isinstance(exc, StoreError) or not exc.retryable:
                raise
            self._schedule_flush()

    def send_after_commit(self, events: list[dict[str, Any]]) -> None:
        """:meth:`send` ``events`` once the current transaction has committed (see
        :meth:`hermesd.store.Store.after_commit`); dropped if it rolls back."""
        if events:
            self.store.after_commit(lambda: [self.send(event) for event in events])

    def send(self, event: dict[str, Any]) -> None:
        """Publish an already-committed event and run the in-process listeners."""
        self.publish(protocol.encode_event(event))
        for listener in list(self.listeners):
            listener(event)

    def since(self, seq: int, limit: int = 1000, types: list[str] | None = None, *,
              newest_first: bool = False) -> list[dict[str, Any]]:
        """Committed events with ``seq > seq``, oldest first, at most ``limit``;
        ``newest_first``: those with ``seq < seq`` (None: any), newest first."""
        self.flush()
        sql = "SELECT * FROM events WHERE " + ("seq < ?" if newest_first else "seq > ?")
        params: list[Any] = [INT64_MAX if newest_first and seq is None else seq]
        if types:
            sql += f" AND type IN ({', '.join('?' for _ in types)})"
            params += types
        sql += f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?"
        params.append(limit)
        return [_wire(r) for r in self.store.all(sql, params)]

    def oldest_seq(self) -> int:
        """The lowest seq still kept (retention removes events oldest first; 0 when none)."""
        row = self.store.one("SELECT MIN(seq) AS seq FROM events")
        return (row or {}).get("seq") or 0

    def gap(self, since: int) -> dict[str, int] | None:
        """``{"since", "oldest_seq"}`` when events after ``since`` were removed by
        retention (the oldest kept is not ``since + 1``), else None.  Seqs are
        contiguous (``AUTOINCREMENT``; a rolled-back insert gives its seq back),
        and retention removes only a prefix and always keeps the newest event."""
        oldest = self.oldest_seq()
        return {"since": since, "oldest_seq": oldest} if oldest > since + 1 else None

    def last_seq(self) -> int:
        """The highest committed seq (0 when there is none)."""
        self.flush()
        row = self.store.one("SELECT MAX(seq) AS seq FROM events")
        return (row or {}).get("seq") or 0
