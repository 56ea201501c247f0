"""Idempotent submission: the same request sent twice makes one job.

A client that is not sure its request was accepted (a timeout, a lost
connection, a cron line run again) sends it again with the same
``idempotency_key`` (the name Stripe's API and the IETF draft
draft-ietf-httpapi-idempotency-key-header give it): the answer is the job the
first request made — same id, with ``repeat: true`` — and no second job starts.
The key is stored with what the request made, in a unique column
``idempotency_key`` of its table — the job's (``jobs``), or the Kanban task's
(``kanban_tasks``, for ``kanban.create``: a task is no job) — so it holds for as
long as that row is kept (until retention or ``clean`` removes a job) and across
restarts.  Keys are per request kind (``delegate``, ``spawn_parallel``,
``session.send``, ``batch.run``, ``kanban.create``): the same text sent to two of
them is two keys.  A repeat is the same request: the key is stored with a digest of the
request's other arguments (SHA-256 of their canonical JSON), and the key sent
again with other arguments is refused (``bad_request`` naming the key and the
first job or task), as the draft (422, "a key reused with a different payload") and
Stripe do, instead of answering a job the caller did not ask for.  A job stored
before digests were (a key alone) is answered whatever the repeat's arguments.
"""

from __future__ import annotations

import json
from typing import Any

from hermesd.protocol import ProtocolError, arg
from hermesd.redaction import Redactor, Secrets

ARG = "idempotency_key"
"""The argument's name in every request that takes one."""

MAX_KEY_CHARS = 200
"""The longest key accepted (UUIDs, hashes, ``cron-2026-01-01`` fit with room)."""


DIGEST_SEP = "\x1f"
"""Between ``SCOPE:KEY`` and the arguments' digest in the stored form (a key is printable: never in it)."""


def digest(args: dict[str, Any]) -> str:
    """The hex SHA-256 (first 32 digits) of ``args`` but the key, as canonical JSON (sorted keys),
    every secret value it gives a job (:meth:`hermesd.redaction.Secrets.given`) as its
    ``[REDACTED:NAME]``: no digest of a secret is stored (one could be tried against guesses), so a
    repeat that gives other values for the same secrets is the same request."""
    rest = {k: v for k, v in args.items() if k != ARG}
    rest = Redactor(Secrets().given(rest)).data(rest)
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    import hashlib  # here: hashlib maps OpenSSL's libcrypto, which the idle daemon does without

    return hashlib.sha256(text.encode()).hexdigest()[:32]


def key_of(args: dict[str, Any], scope: str) -> str | None:
    """The stored form (``SCOPE:KEY``, :data:`DIGEST_SEP`, the :func:`digest` of the other
    arguments) of the request's ``idempotency_key``, None without one.

    Raises ``ProtocolError(bad_request)`` for a key that is not a string of 1 to
    :data:`MAX_KEY_CHARS` printable characters.
    """
    key = arg(args, ARG, str, None)
    if key is None:
        return None
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ProtocolError("bad_request", f"{ARG} must be 1 to {MAX_KEY_CHARS} printable characters",
                            {"field": ARG})
    return f"{scope}:{key}{DIGEST_SEP}{digest(args)}"


def earlier(store: Any, key: str | None, table: str = "jobs", noun: str = "job") -> dict[str, Any] | None:
    """The row of ``table`` (``jobs``, or another with a unique ``idempotency_key`` column and an
    ``id``) made by a request with stored ``key`` (:func:`key_of`) and still kept, else None.
    ``store``: the :class:`hermesd.store.Store`; ``noun``: what a row of ``table`` is called.

    Raises ``ProtocolError(bad_request)`` naming the key and the first row (``{noun}`` and its id,
    also in the details) when it was made with the same key but other arguments (another digest)."""
    if key is None:
        return None
    scoped, _, _ = key.partition(DIGEST_SEP)
    row = store.one(f"SELECT * FROM {table} WHERE idempotency_key = ? OR (idempotency_key > ? AND idempotency_key < ?)"
                    " LIMIT 1", (scoped, scoped + DIGEST_SEP, scoped + chr(ord(DIGEST_SEP) + 1)))
    if row is None or row["idempotency_key"] in (key, scoped):
        return row
    sent = scoped.partition(":")[2]
    raise ProtocolError("bad_request", f"{ARG} {sent!r} was sent before with other arguments ({noun} {row['id']}); "
                        "a repeat must be the same request, another request needs another key",
                        {"field": ARG, noun: row["id"]})


def repeat(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (the first request's kind of reply, for the earlier job or task) marked as a repeat."""
    return {**answer, "repeat": True}
