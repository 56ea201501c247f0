"""The approval requests of one daemon (:class:`Approvals`, the service of
:class:`hermesd.control.approvals.ApprovalsPlugin`, which the module doc there describes): made at
their first use — the first ``approvals.*`` or ``child.approval*`` op, or at start when a request
is pending — so an idle daemon that never had one imports none of it (bench/README.md)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from hermesd import clock
from hermesd.contract.states import TERMINAL
from hermesd.protocol import ProtocolError

if TYPE_CHECKING:
    from hermesd.context import Context
    from hermesd.control.hooks import JobEndHooks

FOLLOW_SECONDS = 30.0
"""A client that listed the approvals with ``follow: true`` this recently counts as a person to ask."""

MAX_LIST = 500
"""Most requests one ``approvals.list`` returns (the newest)."""


class Approvals:
    """The approval requests of this daemon (the service of :class:`ApprovalsPlugin`)."""

    def __init__(self, ctx: Context, hooks: JobEndHooks):
        self.ctx, self.hooks = ctx, hooks
        self.waiters: dict[str, list[asyncio.Future]] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.followed: float | None = None  # monotonic time of the last follower's list
        self.chats: dict[tuple[str, str], float] = {}  # (session, watcher) → monotonic time of its last list

    # reading ---------------------------------------------------------------

    def get(self, request_id: str) -> dict[str, Any]:
        """The request ``request_id`` as :meth:`record`; raises ``ProtocolError(not_found)``."""
        row = self.ctx.store.one("SELECT * FROM approvals WHERE id = ?", (request_id,))
        if row is None:
            raise ProtocolError("not_found", f"no approval request {request_id!r}", {"id": request_id})
        return self.record(row)

    @staticmethod
    def record(row: dict[str, Any]) -> dict[str, Any]:
        """The wire shape of a row: its columns, ``deadline`` as ``expires_at`` (ISO 8601 UTC)."""
        out = {k: v for k, v in row.items() if k != "deadline"}
        out["expires_at"] = clock.iso(row["deadline"])
        return out

    def list(self, state: str | None, job: str | None, session: str | None = None) -> list[dict[str, Any]]:
        """Requests, oldest first (the newest :data:`MAX_LIST`), of ``state`` (None: all), ``job``
        and ``session`` (its jobs)."""
        where, params = [], []
        for column, value in (("state", state), ("job", job)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT * FROM approvals" + (" WHERE " + " AND ".join(where) if where else "")
        rows = self.ctx.store.all(f"{sql} ORDER BY created_at DESC, id DESC LIMIT {MAX_LIST}", params)
        return [self.record(r) for r in reversed(rows) if session is None or self.session_of(r["job"]) == session]

    def pending_for(self, job: str, tool: str, arguments: Any) -> dict[str, Any] | None:
        """The pending request of ``job`` for the call of ``tool`` with ``arguments``, or None."""
        for row in self.ctx.store.all("SELECT * FROM approvals WHERE job = ? AND tool = ? AND state = 'pending'",
                                      (job, tool)):
            if row["arguments"] == arguments:
                return self.record(row)
        return None

    def session_of(self, job: str) -> str | None:
        """The session ``job`` belongs to (a turn's, or its children's), or None."""
        return (self.ctx.jobs.get(job) or {}).get("session")

    def watch(self, session: str, watcher: str, leave: bool = False) -> None:
        """A ``hermesctl chat`` of ``session`` (its ``watcher`` id) is open (or, ``leave``, closed)."""
        if leave:
            self.chats.pop((session, watcher), None)
        else:
            self.chats[(session, watcher)] = clock.monotonic()

    def nobody(self, session: str | None = None) -> str | None:
        """Why no person can be asked now about a job of ``session``, or None when one can (a hook,
        a follower of every request, or a chat of that session open within :data:`FOLLOW_SECONDS`)."""
        if self.ctx.config.hooks.on_approval_request:
            return None
        now = clock.monotonic()
        if self.followed is not None and now - self.followed < FOLLOW_SECONDS:
            return None
        for (chat_session, watcher), seen in list(self.chats.items()):
            if now - seen >= FOLLOW_SECONDS:
                del self.chats[(chat_session, watcher)]
            elif chat_session == session:
                return None
        return ("nobody to ask: no hooks.on_approval_request is configured, nobody follows "
                "`hermesctl approvals --follow`" + (f" and no `hermesctl chat {session}` is open" if session else "")
                + "; dangerous commands run only when delegation.subagent_auto_approve is true")

    # changing --------------------------------------------------------------

    def request(self, job: str, tool: str, arguments: dict[str, Any], why: str) -> dict[str, Any]:
        """A new request of ``job`` (or, with nobody to ask, its refusal: ``state`` ``denied``, not stored).
        A pending request of the job for the same call is that request: a job resumed after a
        restart of the daemon (its journal) asks again, and still waits for the same answer."""
        again = self.pending_for(job, tool, arguments)
        if again is not None:  # the same call asked again: a job resumed after a restart
            self.ctx.runner.pause_timeout(job)
            return again
        session = self.session_of(job)
        nobody = self.nobody(session)
        if nobody is not None:
            return {"id": None, "job": job, "tool": tool, "state": "denied", "reason": nobody}
        chain, parent = [], (self.ctx.jobs.get(job) or {}).get("parent")
        while parent and parent not in chain:
            chain.append(parent)
            parent = (self.ctx.jobs.get(parent) or {}).get("parent")
        row = {"id": f"apr_{os.urandom(6).hex()}", "job": job, "chain": chain, "tool": tool, "arguments": arguments,
               "why": why, "state": "pending", "created_at": clock.now_iso(),
               "deadline": time.time() + self.ctx.config.approvals.timeout_seconds}
        with self.ctx.store.transaction():
            self.ctx.store.insert("approvals", row)
            self.ctx.events.emit("approval.requested", job=job, session=session, data=self.record(row))
        self._arm(row)
        self.ctx.runner.pause_timeout(job)  # a person's time is not the job's budget
        command = self.ctx.config.hooks.on_approval_request
        if command:
            run = self.hooks.run(command, self.ctx.jobs.get(job) or {"id": job, "status": "running"},
                                 what="hooks.on_approval_request", record=self.record(row),
                                 env={"HERMES_APPROVAL_ID": row["id"]})
            task = asyncio.get_running_loop().create_task(run)
            self.hooks.running[task] = job
            task.add_done_callback(lambda t: self.hooks.running.pop(t, None))
        return self.record(row)

    def answer(self, request_id: str, state: str, reason: str | None, by: str) -> dict[str, Any]:
        """Settle a pending request (``approved``, ``denied``, ``timed_out``, ``cancelled``); returns it.
        Raises ``ProtocolError``: ``not_found``, ``invalid_state`` (already answered)."""
        current = self.get(request_id)
        if current["state"] != "pending":
            raise ProtocolError("invalid_state", f"approval request {request_id} is already {current['state']}"
                                + (f" ({current['reason']})" if current.get("reason") else ""), {"id": request_id})
        fields = {"state": state, "reason": reason, "answered_by": by, "answered_at": clock.now_iso()}
        with self.ctx.store.transaction():
            self.ctx.store.update("approvals", "id", request_id, fields)
            self.ctx.events.emit("approval.answered", job=current["job"], session=self.session_of(current["job"]),
                                 data={**current, **fields})
        timer = self.timers.pop(request_id, None)
        if timer is not None:
            timer.cancel()
        self.ctx.runner.resume_timeout(current["job"])
        answered = {**current, **fields}
        for waiter in self.waiters.pop(request_id, []):
            if not waiter.done():
                waiter.set_result(answered)
        return answered

    async def wait(self, request_id: str, seconds: float) -> dict[str, Any]:
        """The request once it is answered, or as it is after ``seconds``."""
        current = self.get(request_id)
        if current["state"] != "pending":
            return current
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(request_id, []).append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), seconds)
        except asyncio.TimeoutError:
            return self.get(request_id)
        finally:
            waiters = self.waiters.get(request_id)
            if waiters and waiter in waiters:
                waiters.remove(waiter)

    def _arm(self, row: dict[str, Any]) -> None:
        """Time the request out at its deadline (wall clock, as stored)."""
        delay = max(0.0, row["deadline"] - time.time())
        self.timers[row["id"]] = asyncio.get_running_loop().call_later(delay, self._expire, row["id"])

    def _expire(self, request_id: str) -> None:
        self.timers.pop(request_id, None)
        limit = self.ctx.config.approvals.timeout_seconds
        try:
            self.answer(request_id, "timed_out", f"nobody answered within approvals.timeout_seconds={limit:g}",
                        "hermesd")
        except ProtocolError:
            pass  # answered meanwhile

    def end_of(self, job: str) -> None:
        """Job ``job`` ended: its pending requests are cancelled."""
        for row in self.ctx.store.all("SELECT id FROM approvals WHERE job = ? AND state = 'pending'", (job,)):
            self.answer(row["id"], "cancelled", f"job {job} ended while it waited", "hermesd")

    def restore(self) -> None:
        """At start: pending requests of jobs that ended are cancelled, the others' deadlines armed."""
        for row in self.ctx.store.all("SELECT * FROM approvals WHERE state = 'pending'"):
            job = self.ctx.jobs.get(row["job"])
            if job is None or job["status"] in TERMINAL:
                self.answer(row["id"], "cancelled", f"job {row['job']} ended while it waited (hermesd stopped "
                            f"meanwhile; the job is {job['status'] if job else 'gone'})", "hermesd")
            else:
                self._arm(row)

    def shutdown(self) -> None:
        """Deadlines are not timed in a stopped daemon (they are kept in the rows)."""
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
