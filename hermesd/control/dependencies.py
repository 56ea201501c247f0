"""Jobs that start after others (``hermesctl delegate --after ID[,ID]``).

A job with ``after`` (a list of job ids, kept in its ``spec``) stays ``queued``
outside the scheduler until every one of them is terminal: when all
``completed`` it joins the queue; when one ended otherwise it ends ``failed``
itself, with an error naming that job, its status and its error.  Rules checked
when the job is submitted: every id must exist (``not_found``), and the graph
of ``after`` links must stay acyclic (``bad_request``; a new job's id is fresh,
so a cycle can only come from a job named twice or a corrupted graph).
"""

from __future__ import annotations

from typing import Any, Callable

from hermesd import jobs as jobs_mod
from hermesd.protocol import ProtocolError

MAX_AFTER = 64
"""Most jobs one job may wait for."""

Row = dict[str, Any]


def after_of(row: Row | None) -> list[str]:
    """The ids job ``row`` waits for ([] for none)."""
    return list(((row or {}).get("spec") or {}).get("after") or [])


def check(job_id: str, after: Any, get: Callable[[str], Row | None]) -> list[str]:
    """Validate the ``after`` argument of new job ``job_id``; returns the ids, in order, once each.

    Raises ``ProtocolError``: ``bad_request`` (not a list of ids, too many, the job
    itself, a cycle through the existing links), ``not_found`` (an unknown id).
    """
    if not isinstance(after, list) or not all(isinstance(i, str) and i for i in after):
        raise ProtocolError("bad_request", "argument 'after' must be a list of job ids", {"field": "after"})
    ids = list(dict.fromkeys(after))
    if len(ids) > MAX_AFTER:
        raise ProtocolError("bad_request", f"'after' names {len(ids)} jobs; at most {MAX_AFTER}", {"field": "after"})
    for dep in ids:
        if get(dep) is None:
            raise ProtocolError("not_found", f"after: no job {dep!r}", {"field": "after", "job": dep})
    seen: set[str] = set()
    stack = [(dep, (job_id, dep)) for dep in ids]
    while stack:  # depth-first over the existing links: does any path lead back to the new job?
        current, path = stack.pop()
        if current == job_id:
            raise ProtocolError("bad_request", "after: a cycle: " + " -> ".join(path), {"field": "after"})
        if current in seen:
            continue
        seen.add(current)
        stack.extend((nxt, (*path, nxt)) for nxt in after_of(get(current)))
    return ids


def state(row: Row, get: Callable[[str], Row | None]) -> tuple[str, str | None]:
    """Whether job ``row`` may start: ``("ready", None)``, ``("wait", None)`` or
    ``("failed", error)`` when a job it waits for ended without completing (or is gone)."""
    waiting = False
    for dep in after_of(row):
        other = get(dep)
        if other is None:
            return "failed", f"job {dep} it was to start after no longer exists"
        if other["status"] not in jobs_mod.TERMINAL:
            waiting = True
        elif other["status"] != "completed":
            why = f": {other['error']}" if other.get("error") else ""
            return "failed", f"not started: job {dep} it was to start after ended {other['status']}{why}"
    return ("wait", None) if waiting else ("ready", None)
