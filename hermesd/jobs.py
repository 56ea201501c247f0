"""Jobs and their state machine.

::

    queued ──► starting ──► running ──► completed
      │           │            ├──────► failed
      │           │            ├──────► interrupted
      │           │            ├──────► timed_out
      │           │            ├──────► cancelled
      │           └─(same)─────┴──────► lost
      ├──► cancelled | failed | lost
      └◄── starting | running: back to the queue, to resume after a restart (hermesd.resume)

Every transition is checked against :data:`TRANSITIONS` (a terminal state is
final), persisted with its ``job.state`` event in one fsynced transaction, and
only then published.  Terminal hooks run inside that same transaction, so a
completion notification is durable exactly when the terminal state is.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from hermesd import clock
from hermesd.contract.states import ACTIVE, TERMINAL, JobStatus
from hermesd.contract.wire import Wire
from hermesd.events import EventLog
from hermesd.protocol import ProtocolError
from hermesd.store import Store, StoreError


@dataclass(frozen=True)
class AdmissionPool:
    """A pool each job of a kind holds from its admission, not only while it runs (the
    background delegations' ``async``): ``name``, the pool; ``refusal``, the ``capacity_reached``
    message when it is full and the request did not ask to queue (``{running}`` and ``{limit}``
    filled in); ``setting``, the config key of its limit (in the message and the error's details)."""

    name: str
    refusal: str
    setting: str


@dataclass(frozen=True)
class JobKind:
    """One kind of job.

    ``name``: the ``kind`` column; ``prefix``: job ids are ``<prefix>_<hex>``;
    ``process``: whether a job of this kind runs a child process (one without
    goes ``queued → running`` and is ended by its plugin, not by a process exit);
    ``at_shutdown``: what happens to a *queued* job when the daemon stops
    (``stop``: it ends ``interrupted``; ``keep``: it runs after the next start);
    ``at_restart``: what happens to a job found ``starting``/``running`` when the
    daemon starts again (``lost``: its process died with the daemon; ``resume``:
    the plugin's :meth:`hermesd.plugin.Plugin.restore` continues it; ``journal``: its
    child keeps a journal, and a new child resumes it from there, also after a graceful
    stop: :mod:`hermesd.resume`); ``pool``: a pool its jobs hold from admission
    (:class:`AdmissionPool`; the pools a job holds while it runs are the submitter's ``pools``);
    ``entry``: its child's entry point, ``module:function`` (``run(spec, channel, stop) → JobResult``,
    called by :mod:`child.__main__`); ``spec``: its own part of the job spec, a
    :class:`hermesd.contract.wire.Wire` dataclass of its package's ``spec`` leaf (``JobSpec.part``:
    the keys of a job's ``spec`` that are its fields, and what its plugin's ``spec`` hook sets), None:
    no part; ``budget``: what a budget given to a job of the kind covers (``tree``: the job and its
    subagents, a job over it is stopped; ``run``: the run's dispatching stops and what runs finishes,
    named ``<kind> run``: :mod:`hermesd.billing`).
    """

    name: str
    prefix: str
    process: bool = True
    at_shutdown: Literal["stop", "keep"] = "keep"
    at_restart: Literal["lost", "resume", "journal"] = "lost"
    pool: AdmissionPool | None = None
    entry: str = "child.agent:run"
    spec: type[Wire] | None = None
    budget: Literal["tree", "run"] = "tree"


S = JobStatus
STATES = tuple(JobStatus)
TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.STARTING, S.RUNNING, S.CANCELLED, S.FAILED, S.LOST}),
    S.STARTING: frozenset({S.RUNNING, S.QUEUED}) | TERMINAL,
    S.RUNNING: frozenset({S.QUEUED}) | TERMINAL,
}
"""The checked edges of the job state machine (terminal states have none); ``ACTIVE`` and
``TERMINAL`` are re-exported from :mod:`hermesd.contract`.  ``starting`` means "its process
was spawned": a job kind with a process goes ``queued → starting → running``, one without
(:attr:`JobKind.process` false) ``queued → running`` (:func:`check_transition`).
``starting``/``running → queued``: a job whose process ended with the daemon goes back to the
queue to resume from its journal in a new child (:mod:`hermesd.resume`)."""
__all__ = ["ACTIVE", "TERMINAL", "TRANSITIONS", "AdmissionPool", "JobKind", "JobTable", "InvalidTransition", "check_transition", "record"]
PROCESS_EDGES = {(S.QUEUED, S.STARTING): True, (S.QUEUED, S.RUNNING): False, (S.RUNNING, S.QUEUED): True}
"""Edges only a job kind with a process (True) or only one without (False) may take."""
RECORD_FIELDS = ("id", "kind", "status", "exit_reason", "goal", "context", "toolsets", "role", "model",
                 "session", "parent", "summary", "error", "api_calls", "tokens", "duration_seconds",
                 "dispatched_at", "started_at", "completed_at", "pid", "resumes", "resumed_at")

TerminalHook = Callable[[dict[str, Any]], list[dict[str, Any]]]


class InvalidTransition(ProtocolError):
    """A transition not allowed by :data:`TRANSITIONS` (protocol code ``invalid_state``)."""

    def __init__(self, job_id: str, old: str, new: str):
        super().__init__("invalid_state", f"job {job_id} cannot go from {old} to {new}",
                         {"job": job_id, "status": old, "requested": new})


def check_transition(job_id: str, old: str, new: str, *, process: bool = True) -> None:
    """Raise :class:`InvalidTransition` unless ``old → new`` is allowed for a job
    kind with (``process``) or without a process."""
    if new not in TRANSITIONS.get(old, frozenset()) or PROCESS_EDGES.get((old, new), process) != process:
        raise InvalidTransition(job_id, old, new)


def record(row: dict[str, Any]) -> dict[str, Any]:
    """The public job record (the ``job`` op's reply, ``docs/protocol.md``) from a ``jobs`` row."""
    out = {k: row.get(k) for k in RECORD_FIELDS if k != "tokens"}
    out["tokens"] = {"input": row.get("tokens_in") or 0, "output": row.get("tokens_out") or 0,
                     "cache_write": row.get("cache_write") or 0, "cache_read": row.get("cache_read") or 0}
    out["cost_usd"] = round(float(row.get("cost_usd") or 0.0), 6)  # what had a price (hermesd.billing)
    out["cost_unknown"] = bool(row.get("cost_unknown"))  # some tokens' model had no price
    out["background"] = bool(row.get("background"))
    out["trace"] = row.get("trace") or []
    return out


def _filtered(select: str, within: dict[str, tuple[str, ...] | None],
              equal: dict[str, Any]) -> tuple[str, list[Any]]:
    """``select`` with ``WHERE``: each column of ``within`` in its values (when given),
    each of ``equal`` equal to its value (when not None); returns ``(sql, params)``."""
    sql, params = select + " WHERE 1=1", []
    for column, values in within.items():
        if values:
            sql += f" AND {column} IN ({', '.join('?' for _ in values)})"
            params += list(values)
    for column, value in equal.items():
        if value is not None:
            sql += f" AND {column} = ?"
            params.append(value)
    return sql, params


class JobTable:
    """All jobs: create, read, and move through the state machine.

    ``kinds``: the job kinds by name (``hermesd.plugin.Plugins.kinds``): their id
    prefixes and whether they run a process.  ``terminal_hooks`` are called
    inside the terminal transition's transaction with the updated row and return
    extra wire events to publish after commit.
    """

    def __init__(self, store: Store, events: EventLog, kinds: Mapping[str, JobKind] | None = None):
        self.store = store
        self.events = events
        self.kinds: Mapping[str, JobKind] = kinds if kinds is not None else {}
        self.terminal_hooks: list[TerminalHook] = []
        self._started_mono: dict[str, float] = {}
        self._waiters: dict[str, list[asyncio.Future]] = {}
        self.pending: Any = None  # hermesd.unwritable.PendingEnds: ends written later (None: a failed end raises)

    def kind(self, name: str) -> JobKind:
        """The :class:`JobKind` called ``name`` (an unknown one: a kind with a process)."""
        return self.kinds.get(name) or JobKind(name, name)

    def new_id(self, kind: str) -> str:
        """A fresh job id: ``<prefix>_<12 hex digits>`` (``deleg_…``, ``bg_…``, ``turn_…``), from
        ``os.urandom`` as ``secrets.token_hex`` does (``secrets`` imports ``hmac``, which loads
        OpenSSL's libcrypto: megabytes of the daemon's resident memory)."""
        return f"{self.kind(kind).prefix}_{os.urandom(6).hex()}"

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The ``jobs`` row of ``job_id`` or None (with its end, when that waits to be written)."""
        return self._held(self.store.one("SELECT * FROM jobs WHERE id = ?", (job_id,)))

    def _held(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        """``row`` as it reads while its end waits to be written (:mod:`hermesd.unwritable`)."""
        return self.pending.overlay(row) if row is not None and self.pending is not None and self.pending.held else row

    def _all_held(self, rows: list[dict[str, Any]], statuses: tuple[str, ...] | None) -> list[dict[str, Any]]:
        """:meth:`_held` of each of ``rows``, less those no longer in ``statuses``."""
        if self.pending is None or not self.pending.held:
            return rows
        return [r for r in map(self._held, rows) if not statuses or r["status"] in statuses]

    def require(self, job_id: str) -> dict[str, Any]:
        """The row of ``job_id``; raises ``ProtocolError(not_found)``."""
        row = self.get(job_id)
        if row is None:
            raise ProtocolError("not_found", f"no job {job_id!r}", {"job": job_id})
        return row

    def list(self, *, statuses: tuple[str, ...] | None = None, parent: str | None = None,
             session: str | None = None, kinds: tuple[str, ...] | None = None,
             limit: int = 1000) -> list[dict[str, Any]]:
        """Rows filtered by status, parent, session and kind, oldest first."""
        sql, params = _filtered("SELECT * FROM jobs", {"status": statuses, "kind": kinds},
                                {"parent": parent, "session": session})
        sql += " ORDER BY dispatched_at, rowid LIMIT ?"
        params.append(limit)
        return self._all_held(self.store.all(sql, params), statuses)

    def page(self, *, statuses: tuple[str, ...] | None = None, kind: str | None = None,
             session: str | None = None, prefix: str | None = None, newest_first: bool = True,
             after: int | None = None, limit: int = 1000) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
        """One page of rows in insertion order (``rowid``), newest or oldest first.

        ``after``: a cursor from an earlier page (this page continues past it);
        ``prefix``: only ids starting with it.  Returns ``([(cursor, row)…],
        more)``: each row with its cursor, and whether rows beyond this page
        exist.  A page costs an index walk of ``limit`` rows, whatever the
        table's size.
        """
        sql, params = _filtered("SELECT rowid AS cursor_, * FROM jobs", {"status": statuses},
                                {"kind": kind, "session": session})
        if prefix:
            sql += " AND id >= ? AND id < ?"  # a range on the primary key, unlike LIKE
            params += [prefix, prefix + "\U0010ffff"]
        if after is not None:
            sql += " AND rowid < ?" if newest_first else " AND rowid > ?"
            params.append(after)
        sql += f" ORDER BY rowid {'DESC' if newest_first else 'ASC'} LIMIT ?"
        params.append(limit + 1)
        rows = self._all_held(self.store.all(sql, params), statuses)
        return [(row.pop("cursor_"), row) for row in rows[:limit]], len(rows) > limit

    def create(self, kind: str, *, replace_ended: bool = False, **fields: Any) -> dict[str, Any]:
        """Insert a new ``queued`` job and publish ``job.queued``; returns its row.

        ``fields`` are ``jobs`` columns (``goal``, ``toolsets``, ``spec``…); ``id``
        defaults to :meth:`new_id`.  ``replace_ended``: a job kind whose ids are
        names (a batch run) takes the id of an earlier attempt that has ended; its
        row goes in the same transaction (its events stay).  Raises
        ``invalid_state`` when that attempt has not ended.
        """
        row = {"id": fields.pop("id", None) or self.new_id(kind), "kind": kind, "status": S.QUEUED,
               "dispatched_at": clock.now_iso(), **fields}
        with self.store.transaction() as db:
            old = self.get(row["id"]) if replace_ended else None
            if old is not None:
                if old["status"] not in TERMINAL:
                    raise ProtocolError("invalid_state", f"job {old['id']} is {old['status']}",
                                        {"job": old["id"], "status": old["status"]})
                db.execute("DELETE FROM jobs WHERE id = ?", (old["id"],))
            self.store.insert("jobs", row)
            row = self.require(row["id"])
            self.events.send_after_commit([self.events.record("job.queued", job=row["id"], session=row.get("session"),
                                                              data={"job": record(row)})])
        return row

    def update(self, job_id: str, **fields: Any) -> None:
        """Persist non-state fields (pid, progress counters); no event."""
        self.store.update("jobs", "id", job_id, fields)

    def transition(self, job_id: str, status: str, **fields: Any) -> dict[str, Any]:
        """Move ``job_id`` to ``status`` with extra column ``fields``; returns the new row.

        Raises :class:`InvalidTransition` (``invalid_state``) or ``not_found``.  A terminal
        transition that cannot be written now (a ``retryable`` :class:`StoreError`) is held by
        :attr:`pending` and written later; the row returned is the row as it will be.
        """
        row = self.require(job_id)
        previous = row["status"]
        check_transition(job_id, previous, status, process=self.kind(row["kind"]).process)
        now = clock.now_iso()
        if status == "running" and not row.get("started_at"):
            fields.setdefault("started_at", now)
            self._started_mono[job_id] = clock.monotonic()
        if status in TERMINAL:
            fields.setdefault("completed_at", now)
            if "duration_seconds" not in fields or fields["duration_seconds"] is None:
                started = self._started_mono.pop(job_id, None)
                if started is not None:
                    fields["duration_seconds"] = clock.monotonic() - started
                elif row.get("started_at"):
                    fields["duration_seconds"] = max(0.0, (clock.parse_iso(now) - clock.parse_iso(row["started_at"])).total_seconds())
                else:
                    fields["duration_seconds"] = 0.0
            self._started_mono.pop(job_id, None)
        extra: list[dict[str, Any]] = []
        before = row
        try:
            with self.store.transaction():
                self.store.update("jobs", "id", job_id, {"status": status, **fields})
                row = self.require(job_id)
                event = self.events.record("job.state", job=job_id, session=row.get("session"),
                                           data={"status": status, "previous": previous, "job": record(row)})
                if status in TERMINAL:
                    for hook in self.terminal_hooks:
                        extra += hook(row)
                self.events.send_after_commit([event, *extra])
                if status in TERMINAL:
                    self.store.after_commit(lambda: self.wake(job_id, row))
        except StoreError as exc:
            if status not in TERMINAL or self.pending is None or not exc.retryable:
                raise
            return self.pending.hold(before, status, fields, exc)
        return row

    def wake(self, job_id: str, row: dict[str, Any]) -> None:
        """Resolve the futures of :meth:`wait` for ``job_id`` with its terminal ``row``."""
        for fut in self._waiters.pop(job_id, []):
            if not fut.done():
                fut.set_result(row)

    def wait(self, job_id: str) -> asyncio.Future:
        """A future resolved with the row once ``job_id`` is terminal (already-terminal: resolved now)."""
        fut = asyncio.get_running_loop().create_future()
        row = self.require(job_id)
        if row["status"] in TERMINAL:
            fut.set_result(row)
        else:
            self._waiters.setdefault(job_id, []).append(fut)
        return fut
