"""Capacity caps and the queue in front of them.

Caps are *pools* with a limit: ``global`` (``supervisor.max_children``: every
child process of every kind), a pool a job kind's jobs hold from admission
(:class:`hermesd.jobs.AdmissionPool`: ``async``, ``delegation.max_async_children``,
background delegations), and per-owner pools created on demand, such as
``group:<id>`` (``delegation.max_concurrent_children`` for one foreground
parallel group) or ``batch:<id>`` (a batch's ``num_workers``).

A job holds its slots from the moment it is started (or, for a background
delegation, admitted).  What a client is told is what holds: the slots of the
job's own caps (``async``, ``group:…``, ``batch:…``, ``session:…``) are given
back when the job turns terminal (:meth:`Scheduler.release` with
``keep=PROCESS_POOLS``), before that state is published, so a client that
saw a job end never meets ``capacity_reached`` on its account.  The
``global`` slot (``supervisor.max_children``) counts *processes*: it is held
until the job's process has been reaped, so the number of live child processes
never exceeds it, not even for an instant (a job that needs it meanwhile waits
in the queue; ``global`` never refuses).

The queue is FIFO with skipping: a job whose own pool is full (its group, its
batch) never holds back a job behind it that has room.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hermesd.protocol import ProtocolError

PROCESS_POOLS = ("global",)
"""Pools that count live processes: held until a job's process is reaped."""


@dataclass
class _Waiting:
    job: str
    pools: tuple[str, ...]


class Scheduler:
    """Pools, holdings and the wait queue.

    ``limits`` maps pool name → max holders; ``prefix_limits`` gives the limit
    of every pool named ``<prefix>…`` without one of its own (e.g.
    ``{"session:": 1}``: one turn at a time per session).
    """

    def __init__(self, limits: dict[str, int], prefix_limits: dict[str, int] | None = None):
        self.limits = dict(limits)
        self.prefix_limits = dict(prefix_limits or {})
        self.count: Counter[str] = Counter()
        self.held: dict[str, set[str]] = {}
        self.queue: list[_Waiting] = []

    def set_limit(self, pool: str, limit: int) -> None:
        """Create or change a pool's limit (lowering it never stops running jobs)."""
        self.limits[pool] = limit

    def room(self, pool: str) -> int:
        """Free slots in ``pool`` (unknown pools are unlimited)."""
        limit = self.limit(pool)
        return 1 << 30 if limit is None else limit - self.count[pool]

    def limit(self, pool: str) -> int | None:
        """The limit of ``pool``: its own, else that of its prefix (``session:`` …), else None."""
        if pool in self.limits:
            return self.limits[pool]
        prefix = pool.partition(":")[0] + ":"
        return self.prefix_limits.get(prefix)

    def try_hold(self, job: str, pools: tuple[str, ...]) -> bool:
        """Take a slot in each of ``pools`` not yet held by ``job`` — all or nothing."""
        have = self.held.setdefault(job, set())
        need = [p for p in pools if p not in have]
        if any(self.room(p) <= 0 for p in need):
            if not have:
                self.held.pop(job, None)
            return False
        for p in need:
            have.add(p)
            self.count[p] += 1
        return True

    def admit(self, job: str, pool: str, *, queue: bool, refusal: str, setting: str) -> bool:
        """Admit ``job`` into ``pool`` now (a slot it holds from admission:
        :class:`hermesd.jobs.AdmissionPool`).

        Returns True when it holds a slot now, False when it was queued to wait
        for one (``queue=True``).  Raises ``ProtocolError(capacity_reached)`` with
        ``refusal`` (``{running}``, ``{limit}``, ``{setting}`` filled in) when the pool
        is full and ``queue`` is False.
        """
        if self.try_hold(job, (pool,)):
            return True
        if queue:
            return False
        limit, running = self.limits.get(pool), self.count[pool]
        raise ProtocolError("capacity_reached", refusal.format(running=running, limit=limit, setting=setting),
                            {"pool": pool, "limit": limit, "running": running})

    def enqueue(self, job: str, pools: tuple[str, ...]) -> None:
        """Queue ``job`` until it can hold every pool in ``pools``."""
        self.queue.append(_Waiting(job, pools))

    def take_startable(self) -> list[str]:
        """Remove and return, in FIFO order, every queued job that now fits (slots taken)."""
        started, waiting = [], []
        for entry in self.queue:
            if self.try_hold(entry.job, entry.pools):
                started.append(entry.job)
            else:
                waiting.append(entry)
        self.queue = waiting
        return started

    def is_queued(self, job: str) -> bool:
        """True while ``job`` waits in the queue."""
        return any(w.job == job for w in self.queue)

    def queued_jobs(self) -> list[str]:
        """Ids waiting in the queue, in order."""
        return [w.job for w in self.queue]

    def release(self, job: str, keep: tuple[str, ...] = ()) -> None:
        """Drop ``job`` from the queue and give back every slot it holds but those in ``keep``."""
        self.queue = [w for w in self.queue if w.job != job]
        held = self.held.pop(job, set())
        for pool in held - set(keep):
            self.count[pool] -= 1
        if held & set(keep):
            self.held[job] = held & set(keep)

    def usage(self) -> dict[str, dict[str, int | None]]:
        """``{pool: {"used": n, "limit": m}}`` for status displays."""
        pools = set(self.limits) | {p for p, n in self.count.items() if n}
        return {p: {"used": self.count[p], "limit": self.limit(p)} for p in sorted(pools)}
