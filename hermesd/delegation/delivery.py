"""Completion notifications of background delegations.

When a background job reaches any terminal state, a notification row is
written *in the same transaction* as the transition, holding the rendered,
self-contained block (the parent may be deep in other work and must not need
its history to understand it), and an ``async_delegation`` event is recorded.

Delivery: a notification with no originating session is delivered by its
event (clients read it with ``events``/``wait``) and acknowledged at once.  One
with a session is handed to that session as a new turn when the session is
idle (see ``hermesd.sessions.service``), and acknowledged (``delivered``) in the
same transaction that stores the turn — exactly once, across restarts too.
"""

from __future__ import annotations

from typing import Any

from hermesd import clock
from hermesd.delegation.notifications import Notifications
from hermesd.events import EventLog
from hermesd.store import Store


def _duration(seconds: float | None) -> str:
    seconds = float(seconds or 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m {sec}s" if hours else f"{minutes}m {sec}s"


def render_block(job: dict[str, Any]) -> str:
    """The self-contained text block for a finished background job row.

    Title with the id, dispatch time and age, goal, context, toolsets, role,
    model, status, API calls, duration, then the result — or the partial output
    and the reason when it did not complete.
    """
    status = job["status"]
    done = status == "completed"
    age = _duration(clock.age_seconds(job["dispatched_at"])) if job.get("dispatched_at") else "?"
    lines = [
        f"[Async delegation {job['id']} {'complete' if done else status} - {_duration(job.get('duration_seconds'))}]",
        f"  Dispatched: {job.get('dispatched_at')} ({age} ago)",
        f"  Goal: {job.get('goal') or ''}",
        f"  Context: {job.get('context') or '(none)'}",
        f"  Toolsets: {', '.join(job.get('toolsets') or []) or '(none)'}",
        f"  Role: {job.get('role') or 'leaf'}",
        f"  Model: {job.get('model') or '(default)'}",
        f"  Status: {status} (exit reason: {job.get('exit_reason') or status})",
        f"  API calls: {job.get('api_calls') or 0}",
        f"  Duration: {_duration(job.get('duration_seconds'))}",
    ]
    lines += worktree_lines((job.get("spec") or {}).get("worktree"))
    summary = (job.get("summary") or "").strip()
    if done:
        lines.append("  Result:")
        lines += [f"    {line}" for line in (summary or "(empty)").splitlines()]
    else:
        lines.append("  Partial output:")
        lines += [f"    {line}" for line in (summary or "(none)").splitlines()]
        lines.append(f"  Reason: {job.get('error') or job.get('exit_reason') or status}")
    return "\n".join(lines)


def worktree_lines(worktree: Any) -> list[str]:
    """The notification's lines on the job's git worktree (:mod:`hermesd.worktrees.ops`): its
    path, branch and commits when it holds changes (it is kept), or that it is removed when it
    holds none; none for a job without one."""
    if not isinstance(worktree, dict):
        return []
    if worktree.get("changed") is False:
        return [f"  Worktree: no changes (removed with its branch {worktree['branch']})"]
    lines = [f"  Worktree: {worktree['path']} (branch {worktree['branch']}, kept"
             + (f": {worktree.get('changed_files') or 0} changed file(s), {worktree.get('commit_count') or 0} "
                "commit(s))" if "changed" in worktree else " if it holds changes)")]
    lines += [f"    {c['id'][:12]} {c.get('subject') or ''}" for c in worktree.get("commits") or []]
    return lines


def event_data(job: dict[str, Any], block: str) -> dict[str, Any]:
    """The data of an ``async_delegation`` event for a finished job row."""
    return {
        "delegation_id": job["id"], "goal": job.get("goal"), "context": job.get("context"),
        "toolsets": job.get("toolsets") or [], "role": job.get("role"), "model": job.get("model"),
        "status": job["status"], "exit_reason": job.get("exit_reason"), "api_calls": job.get("api_calls") or 0,
        "duration_seconds": job.get("duration_seconds"), "dispatched_at": job.get("dispatched_at"),
        "completed_at": job.get("completed_at"), "result": job.get("summary"), "error": job.get("error"),
        "session": job.get("session"), "worktree": (job.get("spec") or {}).get("worktree"), "block": block,
    }


class Delivery:
    """The delegation plugin's service (``ctx.service(Delivery)``): writes a background job's
    notification at completion; :attr:`notifications` holds their states
    (:mod:`hermesd.delegation.notifications`), which the sessions service moves as it delivers."""

    def __init__(self, store: Store, events: EventLog):
        self.store = store
        self.events = events
        self.notifications = Notifications(store)

    def on_terminal(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """Store the notification of background ``job``, now terminal (inside the
        transition's transaction); returns the events to publish."""
        block = render_block(job)
        session = job.get("session")
        self.notifications.store_new(job["id"], session, block)
        return [self.events.record("async_delegation", job=job["id"], session=session, data=event_data(job, block))]
