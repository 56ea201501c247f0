"""Idempotent submission: the same request sent twice makes one job.

A client that is not sure its request was accepted (a timeout, a lost
connection, a cron line run again) sends it again with the same
``idempotency_key`` (the name Stripe's API and the IETF draft
draft-ietf-httpapi-idempotency-key-header give it): the answer is the job the
first request made — same id, with ``repeat: true`` — and no second job starts.
The key is stored with the job (``jobs.idempotency_key``, unique), so it holds
for as long as the job is kept (until retention or ``clean`` removes it) and
across restarts.  Keys are per request kind (``delegate``, ``spawn_parallel``,
``session.send``, ``batch.run``): the same text sent to two of them is two
keys.  The earlier job is answered whatever the arguments of the repeat are.
"""

from __future__ import annotations

from typing import Any

from hermesd.protocol import ProtocolError, arg

ARG = "idempotency_key"
"""The argument's name in every request that takes one."""

MAX_KEY_CHARS = 200
"""The longest key accepted (UUIDs, hashes, ``cron-2026-01-01`` fit with room)."""


def key_of(args: dict[str, Any], scope: str) -> str | None:
    """The stored form (``SCOPE:KEY``) of the request's ``idempotency_key``, None without one.

    Raises ``ProtocolError(bad_request)`` for a key that is not a string of 1 to
    :data:`MAX_KEY_CHARS` printable characters.
    """
    key = arg(args, ARG, str, None)
    if key is None:
        return None
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ProtocolError("bad_request", f"{ARG} must be 1 to {MAX_KEY_CHARS} printable characters",
                            {"field": ARG})
    return f"{scope}:{key}"


def earlier(jobs: Any, key: str | None) -> dict[str, Any] | None:
    """The row of the job submitted with stored ``key`` (:func:`key_of`) and still kept, else None.
    ``jobs``: the :class:`hermesd.jobs.JobTable`."""
    if key is None:
        return None
    return jobs.store.one("SELECT * FROM jobs WHERE idempotency_key = ?", (key,))


def repeat(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (the first request's kind of reply, for the earlier job) marked as a repeat."""
    return {**answer, "repeat": True}
