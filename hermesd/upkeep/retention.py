"""Retention: finished jobs, with their folders and events, removed by age and/or count.

The policy is ``retention:`` in the config (``max_age_days``, ``max_jobs``);
:class:`Retention` applies it every ``interval_seconds`` on the event loop,
in transactions of at most ``batch_size`` jobs with a return to the loop
between two (a request waits for one small transaction, never for the whole
clean-up), and ``hermesctl clean`` (the ``clean`` op) applies it, or an
explicit ``older_than_seconds``, at once.  Folders are removed in a worker
thread after their rows are committed (no database access there; the loop
thread stays the only writer of ``state.db``).

What is never removed:

* a job that is not terminal;
* a job whose completion notification is not yet delivered;
* a job whose parent is not terminal (a running or resumable batch's items,
  a live orchestrator's children);
* a job whose git worktree is still there (``spec.worktree`` not ``removed``:
  :mod:`hermesd.worktrees.ops`; ``hermesctl worktrees prune`` lets it go);
* the newest event (``last_seq`` stays, so seqs never restart).

Events go as a prefix: every event older than the oldest job still kept,
and, under ``max_age_days``, every event older than the age limit.  A client
asking ``events_since`` from a removed seq gets a ``gap`` marker with the oldest
seq kept (:meth:`hermesd.events.EventLog.gap`), never a silent hole.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from hermesd.contract.states import TERMINAL
from hermesd.delegation.notifications import DELIVERED
from hermesd.events import EventLog
from hermesd.store import Store

log = logging.getLogger("hermesd")

_TERMINAL = ", ".join("'" + str(getattr(s, 'value', s)) + "'" for s in sorted(TERMINAL))
_KEEP = f"""
    AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.job = j.id AND n.state != '{DELIVERED}')
    AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.id = j.parent AND p.status NOT IN ({_TERMINAL}))
    AND (json_extract(j.spec, '$.worktree.path') IS NULL OR json_extract(j.spec, '$.worktree.state') = 'removed')"""


@dataclass(frozen=True)
class Policy:
    """What to remove: finished jobs ended more than ``max_age_seconds`` ago and/or
    all but the newest ``max_jobs`` finished jobs (None: that rule is off)."""

    max_age_seconds: float | None = None
    max_jobs: int | None = None

    @property
    def active(self) -> bool:
        """True when at least one rule is on."""
        return self.max_age_seconds is not None or self.max_jobs is not None


@dataclass
class Report:
    """What one clean-up removed (or, dry, would remove)."""

    jobs: int = 0
    events: int = 0
    folders: int = 0
    oldest_seq: int = 0
    sample: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``clean`` op's reply fields."""
        return {"jobs": self.jobs, "events": self.events, "folders": self.folders, "oldest_seq": self.oldest_seq,
                "sample": self.sample}


def cutoff_iso(seconds: float) -> str:
    """ISO 8601 UTC time ``seconds`` ago, in the format of ``clock.now_iso`` (they sort as text)."""
    moment = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Retention:
    """Removes what :class:`Policy` says may go, in batches of ``batch_size`` jobs.

    ``job_dir(id)`` is the folder of a job (``jobs/ID``); ``run_in_thread`` runs
    a blocking call off the loop (``loop.run_in_executor`` in the daemon).
    """

    def __init__(self, store: Store, events: EventLog, job_dir: Callable[[str], Path], batch_size: int = 200):
        self.store = store
        self.events = events
        self.job_dir = job_dir
        self.batch_size = batch_size
        self.running = False

    # choosing -----------------------------------------------------------

    def _where(self, policy: Policy) -> tuple[str, list[Any]]:
        rules, params = [], []
        if policy.max_age_seconds is not None:
            rules.append("j.completed_at < ?")
            params.append(cutoff_iso(policy.max_age_seconds))
        if policy.max_jobs is not None:  # older than the max_jobs-th newest finished job
            rules.append(f"j.rowid < (SELECT rowid FROM jobs WHERE status IN ({_TERMINAL}) "
                         "ORDER BY rowid DESC LIMIT 1 OFFSET ?)")
            params.append(max(0, policy.max_jobs - 1))
        where = f"j.status IN ({_TERMINAL}) AND ({' OR '.join(rules) or '0'}){_KEEP}"
        return where, params

    def candidates(self, policy: Policy, limit: int) -> list[str]:
        """Up to ``limit`` ids of jobs the policy removes, oldest first."""
        where, params = self._where(policy)
        rows = self.store.db.execute(f"SELECT j.id FROM jobs j WHERE {where} ORDER BY j.rowid LIMIT ?",
                                     [*params, limit]).fetchall()
        return [row[0] for row in rows]

    def count(self, policy: Policy) -> int:
        """How many jobs the policy removes now."""
        where, params = self._where(policy)
        return self.store.db.execute(f"SELECT COUNT(*) FROM jobs j WHERE {where}", params).fetchone()[0]

    def event_floor(self, policy: Policy) -> int:
        """The highest seq that may go: below the first event of the oldest job kept,
        below the age limit when there is one, and below the newest event."""
        last = self.events.last_seq()
        oldest_job = self.store.db.execute("SELECT id FROM jobs ORDER BY rowid LIMIT 1").fetchone()
        floor = last - 1
        if oldest_job is not None:
            first = self.store.db.execute("SELECT MIN(seq) FROM events WHERE job = ?", (oldest_job[0],)).fetchone()[0]
            if first is not None:
                floor = min(floor, first - 1)
        if policy.max_age_seconds is not None:
            floor = min(floor, self._first_at_or_after(cutoff_iso(policy.max_age_seconds), last) - 1)
        return max(floor, 0)

    def _first_at_or_after(self, moment: str, last: int) -> int:
        """The lowest seq whose time is at or after ``moment`` (``last + 1`` when none): a
        bisection over seq, which follows time, probing the primary key (events have no
        index on time, and a scan of them all would hold the loop)."""
        lo, hi = self.events.oldest_seq(), last + 1
        while lo < hi:
            mid = (lo + hi) // 2
            row = self.store.db.execute("SELECT seq, time FROM events WHERE seq >= ? ORDER BY seq LIMIT 1",
                                        (mid,)).fetchone()
            if row is None or row[1] >= moment:
                hi = mid
            else:
                lo = row[0] + 1
        return lo

    # removing -----------------------------------------------------------

    def remove_jobs(self, ids: list[str]) -> None:
        """Delete the rows of ``ids`` (jobs and their delivered notifications) in one transaction."""
        marks = ", ".join("?" for _ in ids)
        with self.store.transaction() as db:
            db.execute(f"DELETE FROM notifications WHERE job IN ({marks}) AND state = ?", [*ids, DELIVERED])
            db.execute(f"DELETE FROM jobs WHERE id IN ({marks}) AND status IN ({_TERMINAL})", ids)

    def remove_events(self, floor: int) -> int:
        """Delete at most ``batch_size`` × 10 events with ``seq <= floor``, oldest first; returns how many."""
        oldest = self.events.oldest_seq()
        upto = min(floor, oldest + self.batch_size * 10 - 1)
        if upto < oldest:
            return 0
        with self.store.transaction() as db:
            return db.execute("DELETE FROM events WHERE seq <= ?", (upto,)).rowcount

    def remove_folder(self, job: str) -> bool:
        """Remove ``jobs/ID`` (blocking: call it in a worker thread); False when there was none."""
        path = self.job_dir(job)
        if not path.exists():
            return False
        import shutil  # here: shutil imports bz2 and lzma, a megabyte of the idle daemon (bench/README.md)

        shutil.rmtree(path, ignore_errors=True)
        return True

    async def apply(self, policy: Policy, *, dry_run: bool = False,
                    run_in_thread: Callable[..., Any] | None = None) -> Report:
        """Remove (``dry_run``: count) what ``policy`` selects, a batch per loop turn."""
        report = Report(oldest_seq=self.events.oldest_seq())
        if dry_run:
            report.jobs = self.count(policy)
            report.sample = self.candidates(policy, 20)
            floor = self.event_floor(policy)  # as it is now: removing the jobs lowers it no further
            report.events = max(0, floor - report.oldest_seq + 1) if report.oldest_seq else 0
            return report
        if self.running:
            from hermesd.protocol import ProtocolError

            raise ProtocolError("invalid_state", "a clean-up is already running; try again when it is done")
        self.running = True
        try:
            while True:
                ids = self.candidates(policy, self.batch_size)
                if not ids:
                    break
                self.remove_jobs(ids)
                report.jobs += len(ids)
                report.sample = (report.sample + ids)[:20]
                folders = [self._in_thread(run_in_thread, self.remove_folder, job) for job in ids]
                report.folders += sum(bool(done) for done in await asyncio.gather(*folders))
            floor = self.event_floor(policy)
            while True:
                removed = self.remove_events(floor)
                if not removed:
                    break
                report.events += removed
                await asyncio.sleep(0)
        finally:
            self.running = False
        report.oldest_seq = self.events.oldest_seq()
        if report.jobs or report.events:
            log.info("retention removed %d job(s), %d folder(s), %d event(s); oldest seq kept %d",
                     report.jobs, report.folders, report.events, report.oldest_seq)
        return report

    @staticmethod
    async def _in_thread(run_in_thread: Callable[..., Any] | None, fn: Callable[..., Any], *args: Any) -> Any:
        if run_in_thread is None:
            return fn(*args)
        return await run_in_thread(fn, *args)


def policy_of(config: Any) -> Policy:
    """The :class:`Policy` of a :class:`hermesd.config.Config`'s ``retention:`` section."""
    section = config.retention
    days = section.max_age_days
    return Policy(max_age_seconds=None if days is None else days * 86400.0, max_jobs=section.max_jobs)


class Sweeper:
    """The background half: every ``interval()`` seconds, apply ``policy()`` (both read
    the live config, so a reload takes effect) unless a clean-up is running."""

    def __init__(self, retention: Retention, policy: Callable[[], Policy], interval: Callable[[], float],
                 loop: asyncio.AbstractEventLoop):
        self.retention = retention
        self.policy = policy
        self.interval = interval
        self.loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Arm the timer (the first pass one interval after start)."""
        self._handle = self.loop.call_later(self.interval(), self._tick)

    def now(self) -> None:
        """A pass at once (the config was reloaded: a policy it adds or tightens applies now),
        then one every interval again."""
        if self._handle is not None:
            self._handle.cancel()
            self._tick()

    def _tick(self) -> None:
        policy = self.policy()
        if policy.active and not self.retention.running:
            self._task = self.loop.create_task(self._pass(policy))
        self.start()

    async def _pass(self, policy: Policy) -> None:
        try:
            await self.retention.apply(policy, run_in_thread=lambda fn, *a: self.loop.run_in_executor(None, fn, *a))
        except Exception:  # noqa: BLE001 - retention must never take the daemon down; the next pass retries
            log.exception("retention pass failed")

    def stop(self) -> None:
        """Disarm the timer and cancel a pass in progress (it stops between two batches)."""
        if self._handle is not None:
            self._handle.cancel()
        if self._task is not None:
            self._task.cancel()
