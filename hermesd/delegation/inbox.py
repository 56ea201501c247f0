"""The steer inbox: messages for a running delegation, kept until its child has journaled them.

A message (a person's ``steer``, an agent's ``child.steer``) is a row of ``steer_inbox``, written
before the op answers.  The child fetches the waiting ones before each model call
(``child.inbox``), adds them to its conversation, writes them to its journal with their ``id``
(:mod:`child.journal`), and acknowledges those ids in its next fetch; only an acknowledged message
is removed.  So a message survives what ends a child between the fetch and its journal — a
``kill -9`` of hermesd (which takes its children along), a graceful stop — and the child that
resumes the job fetches it again; one that finds the id in the journal it replays already has it
and only acknowledges it (each message reaches the model once).  A job's messages go with its
terminal transition (nobody reads them after).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hermesd import clock
from hermesd.protocol import ProtocolError
from hermesd.store import Store, StoreError

log = logging.getLogger("hermesd")

MAX_INBOX = 32
"""Most steer messages waiting for one child (not yet acknowledged)."""

MIGRATIONS = {9: """
    CREATE TABLE steer_inbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job TEXT NOT NULL,
        sender TEXT NOT NULL,
        text TEXT NOT NULL,
        sent_at TEXT NOT NULL
    );
    CREATE INDEX steer_inbox_job ON steer_inbox(job, id)
    """}
"""The ``steer_inbox`` table (schema version 9, :func:`hermesd.store.schema`)."""


class Inbox:
    """The steer messages waiting for their children, by job, in ``store``; each with who sent it
    (``agent``: the agent that started the child; ``person``: the ``steer`` op)."""

    def __init__(self, store: Store):
        self.store = store

    def put(self, job: str, message: str, sender: str = "agent") -> int:
        """Keep ``message`` for ``job`` (committed when this returns, or in the caller's
        transaction); returns how many wait.  Raises ``capacity_reached`` past :data:`MAX_INBOX`
        and :class:`hermesd.store.StoreError` when it cannot be written."""
        waiting = self.store.one("SELECT COUNT(*) AS n FROM steer_inbox WHERE job = ?", (job,))["n"]
        if waiting >= MAX_INBOX:
            raise ProtocolError("capacity_reached", f"{job} has {waiting} unread messages; wait for it to "
                                "read them", {"job": job})
        self.store.insert("steer_inbox", {"job": job, "sender": sender, "text": message, "sent_at": clock.now_iso()})
        return waiting + 1

    def fetch(self, job: str, ack: Sequence[int] = ()) -> list[dict[str, Any]]:
        """Remove the messages of ``job`` whose ids are in ``ack`` (its child journaled them; an id
        that is not there any more is no error), then the ones still waiting, oldest first, as
        ``{id, sender, text}``: a message is answered again until it is acknowledged.  A removal
        that cannot be written (``state.db`` locked or its disk full) is left for a later fetch:
        the child acknowledges again what it is answered again and already has."""
        if ack:
            try:
                with self.store.transaction() as db:
                    db.execute(f"DELETE FROM steer_inbox WHERE job = ? AND id IN ({', '.join('?' for _ in ack)})",
                               (job, *ack))
            except StoreError as exc:
                log.warning("steer messages of %s acknowledged but not removed: %s", job, exc)
        return self.store.all("SELECT id, sender, text FROM steer_inbox WHERE job = ? ORDER BY id", (job,))

    def forget(self, job: str) -> None:
        """Remove what still waits for ``job`` (it ended), in the caller's transaction."""
        with self.store.transaction() as db:
            db.execute("DELETE FROM steer_inbox WHERE job = ?", (job,))
