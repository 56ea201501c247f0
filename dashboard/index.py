"""What the dashboard knows of the daemon's jobs, kept from ``ps`` and the event log.

:class:`Index` holds every kept job's record (without its trace: ``job``/``result`` have it) up
to :attr:`Index.limit`, the pending approval requests and each batch's last progress, all updated
from events only (``job.queued``/``job.state`` carry the record, ``job.progress`` the counters),
so a page load asks the daemon nothing about the job list.  :meth:`Index.rows` lays the jobs out
as the tree they are: sessions → their turns, a job → the jobs it started (a batch's items, a
delegation's subagents), a Kanban task → its workers, a parallel group → its jobs, newest first at
every level, a long run of finished children folded."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from hermesd.contract.states import TERMINAL

MAX_JOBS = 50_000
"""Most job records kept (the oldest finished ones go first)."""
FOLD_AFTER = 20
"""Finished children shown under one job before the older ones fold into one line."""
COUNTERS = ("api_calls", "tokens", "cost_usd", "cost_unknown")


@dataclass
class Row:
    """One line of the job tree: a job (``rec``) or a holder (a session, a fold) at ``depth``."""

    depth: int
    rec: dict[str, Any]
    holder: str | None = None  # "holder" (a session, a Kanban task, a group), "fold"
    children: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def newest_first(recs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``recs`` by dispatch time, newest first (ids break ties)."""
    return sorted(recs, key=lambda r: (r.get("dispatched_at") or "", r["id"]), reverse=True)


def holder_kind(key: str, rec: dict[str, Any]) -> str:
    """What holds jobs that are no job's children: a session, a Kanban task, a parallel group."""
    if rec.get("session") == key:
        return "session"
    return {"kb": "Kanban task", "group": "parallel group"}.get(key.split("_", 1)[0], "parent")


def holder_of(rec: dict[str, Any]) -> str | None:
    """What holds a job of the tree's top level: its session, or its parent when that is no kept job
    (a Kanban task, a parallel group); None when it stands alone."""
    return rec.get("session") or rec.get("parent") or None


def matches(rec: dict[str, Any], kind: str | None, state: str | None, text: str | None) -> bool:
    """Whether a job passes the filters: its ``kind``, its ``state`` (or ``live``, ``ended``), ``text``
    in its id, goal, summary or error (any case)."""
    if kind and rec.get("kind") != kind:
        return False
    status = rec.get("status")
    if state and not (status == state or (state == "live" and status not in TERMINAL)
                      or (state == "ended" and status in TERMINAL)):
        return False
    if text:
        hay = " ".join(str(rec.get(k) or "") for k in ("id", "goal", "summary", "error", "session", "parent"))
        return text.lower() in hay.lower()
    return True


class Index:
    """The jobs, approvals and batch progress of one daemon; thread-safe (the feed writes, pages read)."""

    def __init__(self, limit: int = MAX_JOBS):
        self.limit = limit
        self.jobs: dict[str, dict[str, Any]] = {}
        self.children: dict[str, set[str]] = {}
        self.approvals: dict[str, dict[str, Any]] = {}
        self.progress: dict[str, dict[str, Any]] = {}
        self.last_seq = 0
        self.lock = threading.RLock()

    # writing -------------------------------------------------------------

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Add or update job records (from ``ps``, ``job`` or an event)."""
        with self.lock:
            for rec in records:
                rec = {k: v for k, v in rec.items() if k != "trace"}
                old = self.jobs.get(rec["id"])
                self.jobs[rec["id"]] = {**old, **rec} if old else rec
                if rec.get("parent"):
                    self.children.setdefault(rec["parent"], set()).add(rec["id"])
            if len(self.jobs) > self.limit:
                self._trim()

    def _trim(self) -> None:
        finished = sorted((r.get("completed_at") or "", i) for i, r in self.jobs.items() if r.get("status") in TERMINAL)
        for _, job_id in finished[: len(self.jobs) - self.limit]:
            rec = self.jobs.pop(job_id)
            self.children.get(rec.get("parent"), set()).discard(job_id)
            self.progress.pop(job_id, None)

    def apply(self, event: dict[str, Any]) -> tuple[set[str], set[str]]:
        """Take one event; returns ``(topics, job ids)`` it changed: topics ``jobs``, ``job:ID``,
        ``batch:ID``, ``approvals``, ``kanban``, ``bill``, ``status``, ``events``."""
        data = event.get("data") or {}
        etype, job = event.get("type") or "", event.get("job")
        topics, rows = {"events"}, set()
        with self.lock:
            self.last_seq = max(self.last_seq, event.get("seq") or 0)
            rec = data.get("job") if isinstance(data.get("job"), dict) else None
            if rec and rec.get("id"):
                self.add([rec])
                job = rec["id"]
                topics |= {"jobs", "status"} | ({"bill"} if rec.get("status") in TERMINAL else set())
                if rec.get("kind") == "kanban_worker":
                    topics.add("kanban")
            elif etype == "job.progress" and job in self.jobs:
                self.jobs[job].update({k: data[k] for k in COUNTERS if k in data})
                if data.get("activity") or data.get("tool"):
                    self.jobs[job]["activity"] = data.get("tool") or data.get("activity")
                topics.add("bill")
            if etype.startswith("batch.") and job:
                self.progress[job] = {**self.progress.get(job, {}), **data}
                topics.add(f"batch:{job}")
            if etype == "approval.requested" and data.get("id"):
                self.approvals[data["id"]] = data
                topics.add("approvals")
            elif etype == "approval.answered":
                self.approvals.pop(data.get("id"), None)
                topics.add("approvals")
            if etype.startswith("kanban."):
                topics.add("kanban")
            if job:
                rows.add(job)
                topics.add(f"job:{job}")
                parent = (self.jobs.get(job) or {}).get("parent")
                if parent:
                    topics |= {f"job:{parent}", f"batch:{parent}"}
        return topics, rows

    # reading -------------------------------------------------------------

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The record of ``job_id`` (a copy), None when unknown."""
        with self.lock:
            rec = self.jobs.get(job_id)
            return dict(rec) if rec else None

    def kids(self, job_id: str) -> list[dict[str, Any]]:
        """The jobs ``job_id`` started, newest first."""
        with self.lock:
            return newest_first(dict(self.jobs[c]) for c in self.children.get(job_id, ()) if c in self.jobs)

    def waiting(self, job_id: str) -> list[dict[str, Any]]:
        """The pending approval requests of ``job_id``."""
        with self.lock:
            return [a for a in self.approvals.values() if a.get("job") == job_id]

    def kinds(self) -> list[str]:
        """The kinds of the kept jobs."""
        with self.lock:
            return sorted({r.get("kind") or "?" for r in self.jobs.values()})

    def counts(self) -> Counter:
        """Kept jobs by ``(kind, status)``."""
        with self.lock:
            return Counter((r.get("kind") or "?", r.get("status") or "?") for r in self.jobs.values())

    def resumes(self) -> int:
        """Resumes of the kept jobs, added up."""
        with self.lock:
            return sum(int(r.get("resumes") or 0) for r in self.jobs.values())

    def _tops(self) -> list[dict[str, Any]]:
        """The jobs no kept job started: the tree's top level, unsorted (the lock held)."""
        return [r for r in self.jobs.values() if not r.get("parent") or r["parent"] not in self.jobs]

    def _matching(self, kind: str | None, state: str | None, text: str | None) -> list[dict[str, Any]]:
        """The jobs passing the filters (:func:`matches`), unsorted (the lock held)."""
        return [r for r in self.jobs.values() if matches(r, kind, state, text)]

    def tally(self, kind: str | None = None, state: str | None = None, text: str | None = None) -> dict[str, int]:
        """The jobs page's counts, without laying the tree out: ``top``, how many top-level entries
        :meth:`rows` pages through (with a filter: the jobs passing it), and ``live``, how many of
        the kept jobs (passing the filter) have not ended."""
        with self.lock:
            if kind or state or text:
                found = self._matching(kind, state, text)
                return {"top": len(found), "live": sum(1 for r in found if r.get("status") not in TERMINAL)}
            keys = [holder_of(r) for r in self._tops()]
            return {"top": len({k for k in keys if k}) + keys.count(None),
                    "live": sum(1 for r in self.jobs.values() if r.get("status") not in TERMINAL)}

    def rows(self, kind: str | None = None, state: str | None = None, text: str | None = None,
             limit: int = 200, offset: int = 0) -> tuple[list[Row], int]:
        """The job tree as rows, newest first, ``limit`` top-level entries from ``offset``; and how
        many top-level entries there are.  With a filter the matching jobs are listed flat."""
        with self.lock:
            if kind or state or text:
                found = newest_first(self._matching(kind, state, text))
                return [Row(0, dict(r), children=len(self.children.get(r["id"], ()))) for r in
                        found[offset:offset + limit]], len(found)
            tops = newest_first(self._tops())
            entries: list[tuple[str, Any]] = []  # ("job", rec) or ("holder", key)
            held: dict[str, list[dict[str, Any]]] = {}
            for rec in tops:
                key = holder_of(rec)
                if key:
                    if key not in held:
                        held[key] = []
                        entries.append(("holder", key))
                    held[key].append(rec)
                else:
                    entries.append(("job", rec))
            out: list[Row] = []
            for what, entry in entries[offset:offset + limit]:
                if what == "holder":
                    recs = held[entry]
                    live = sum(1 for r in recs if r.get("status") not in TERMINAL)
                    out.append(Row(0, {"id": entry, "kind": holder_kind(entry, recs[0]), "status": "live" if live else
                                       "idle", "goal": f"{len(recs)} job(s), {live} live"}, holder="holder",
                                   children=len(recs)))
                    for rec in recs:
                        self._walk(rec, 1, out)
                else:
                    self._walk(entry, 0, out)
            return out, len(entries)

    def _walk(self, rec: dict[str, Any], depth: int, out: list[Row]) -> None:
        kids = newest_first(self.jobs[c] for c in self.children.get(rec["id"], ()) if c in self.jobs)
        out.append(Row(depth, dict(rec), children=len(kids)))
        live = [k for k in kids if k.get("status") not in TERMINAL]
        ended = [k for k in kids if k.get("status") in TERMINAL]
        for kid in live + ended[:FOLD_AFTER]:
            self._walk(kid, depth + 1, out)
        if len(ended) > FOLD_AFTER:
            rest = Counter(k.get("status") for k in ended[FOLD_AFTER:])
            out.append(Row(depth + 1, {"id": rec["id"], "kind": "", "status": "", "goal": f"… {len(ended) - FOLD_AFTER} "
                           "more finished (" + ", ".join(f"{n} {s}" for s, n in sorted(rest.items())) + ")"},
                           holder="fold"))
