"""What ``hermesctl top`` shows, built from job records and events.

:class:`Board` is the whole picture — jobs, the daemon's caps, batch progress,
recent events — updated only from what the daemon sends (``status``, ``ps``,
events), so the TUI (``client/tui.py``) and the one-shot snapshot (no
terminal, or ``--json``) show the same thing.  The job tree follows the
records' ``session`` and ``parent``: sessions → their jobs → the jobs those
started; live jobs come before finished ones at every level, so running work
stays in view on a small terminal.  This module imports no textual.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from client import render
from client.common import TERMINAL
from client.connection import Connection
from hermesd.contract.providers import PROVIDER_WAIT
from hermesd.protocol import ProtocolError

BACKLOG_EVENTS = 500
"""How many past events a fresh board reads (recently finished jobs come from their ``job.state`` events)."""
MAX_JOBS = 2000
MAX_FINISHED_CHILDREN = 20
PROGRESS_KEYS = ("done", "failed", "discarded", "total", "processed", "rate_per_minute", "eta_seconds")
"""Fields of a batch's progress events (``batch.progress``) that the board keeps."""


@dataclass
class Node:
    """One line of the job tree: ``key`` is unique; ``job`` is the job id (None for sessions, groups, summaries)."""

    key: str
    label: str
    job: str | None = None
    status: str | None = None
    children: list["Node"] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {"key": self.key, "label": self.label, "job": self.job, "status": self.status,
                "children": [c.to_json() for c in self.children]}


def duration(rec: dict[str, Any], now: float | None = None) -> str:
    """A job's duration for display: final, or elapsed so far while it runs (``-`` while unknown)."""
    dur = render.running_for(rec, now)
    return f"{dur:.1f}s" if dur is not None and rec.get("status") in TERMINAL else render.elapsed(dur)


GOAL_CHARS = 50
"""The most of a job's goal a row shows."""
GUIDE_CELLS = 4
"""Cells of the tree's guide per level (textual's ``Tree.guide_depth``); a row with children
also starts with its toggle (``▼ ``, :data:`TOGGLE_CELLS`)."""
TOGGLE_CELLS = 2
"""Cells of a row's toggle (``▼ ``) when it has children."""
SNAPSHOT_INDENT = 2
"""Cells the one-shot snapshot indents each level of the tree by (its rows have no toggle)."""
SNAPSHOT_COLUMNS = 80
"""The width of the one-shot snapshot when neither ``COLUMNS`` nor a terminal says one (the live
``top``'s smallest screen, 80×24)."""


def job_label(rec: dict[str, Any], now: float | None = None, width: int | None = None) -> str:
    """One job as one line, what matters first (a narrow panel cuts the end): id, status,
    the approval request it waits for (``waits_for``), duration (elapsed while running), goal,
    then model calls, cost (``hermesd.billing``: as of its last record), the last thing it did
    while live (``[turn 3 terminal 4s ago]``), kind.  ``width``: the cells the row has; the
    goal gives up its tail first (all of itself if it must) so that calls and cost fit."""
    activity = rec.get("last_activity")
    doing = ""
    if activity and rec.get("status") not in TERMINAL:
        ago = (now if now is not None else time.time()) - activity[0]
        doing = f"  [{activity[1]} {render.elapsed(ago)} ago]"
    cost = f"  {render.cost_text(rec)}" if "cost_usd" in rec else ""
    waits = f"  APPROVAL? {rec['waits_for']}" if rec.get("waits_for") else ""  # first: a narrow panel cuts the end
    head = f"{rec['id']}  {rec.get('status') or '?'}{waits}  {duration(rec, now)}"
    counts = f"  · {render.counted(rec.get('api_calls'), 'call')}{cost}"
    room = GOAL_CHARS if width is None else min(GOAL_CHARS, width - len(head) - len(counts) - 2)
    goal = render.short(rec.get("goal"), room) if room >= 4 else ""
    return f"{head}{'  ' + goal if goal else ''}{counts}{doing}  {rec.get('kind') or '?'}"


def governor_line(limiter: dict[str, Any]) -> str:
    """One endpoint of ``status``'s ``governor`` for the caps panel, what matters first (at 80
    columns the panel is 36 cells wide and 6 lines high, and cuts the rest): ``PAUSED 1.2s`` or
    the calls in flight, how many jobs wait, then the endpoint, then why it is paused."""
    state = (f"PAUSED {render.remaining(limiter.get('paused_until'), limiter.get('paused_seconds')):.1f}s"
             if limiter.get("reason") else f"{limiter.get('in_flight', 0)} in flight")
    waiting = f", {len(limiter['waiting'])} waiting" if limiter.get("waiting") else ""
    why = f": {limiter['reason']}" if limiter.get("reason") else ""
    return f"{state}{waiting} · {limiter.get('endpoint')}{why}"


def is_live(node: "Node") -> bool:
    """A job not yet finished, or a holder (session, group) with a live job under it."""
    return node.status not in TERMINAL if node.job else any(is_live(c) for c in node.children)


def bar(used: int, limit: int | None, width: int = 20) -> str:
    """``█████░░░░░ 2/4`` (no bar when the pool is unlimited)."""
    if not limit:
        return f"{used}/-"
    filled = min(width, round(width * used / limit))
    return "█" * filled + "░" * (width - filled) + f" {used}/{limit}"


class Board:
    """Jobs, caps, batch progress and recent events of one daemon; fed by :meth:`apply` and friends."""

    def __init__(self, recent: int = 200):
        self.jobs: dict[str, dict[str, Any]] = {}
        self.progress: dict[str, dict[str, Any]] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=recent)
        self.status: dict[str, Any] | None = None
        self.approvals: dict[str, dict[str, Any]] = {}  # pending approval requests by id
        self.last_seq = 0

    def add_jobs(self, records: Iterable[dict[str, Any]]) -> None:
        """Add or replace job records (from ``ps`` or ``job``)."""
        for rec in records:
            self.jobs[rec["id"]] = {**self.jobs.get(rec["id"], {}), **rec}
        self._trim()

    def apply(self, event: dict[str, Any]) -> None:
        """Take one event: records in ``data.job`` update the job; other data is progress of ``event.job``."""
        self.last_seq = max(self.last_seq, event.get("seq") or 0)
        self.events.append(event)
        data = event.get("data") or {}
        if event["type"] == "approval.requested" and data.get("id"):
            self.approvals[data["id"]] = data
        elif event["type"] == "approval.answered":
            self.approvals.pop(data.get("id"), None)
        if isinstance(data.get("job"), dict) and data["job"].get("id"):
            self.add_jobs([data["job"]])
            return
        if event["type"] == "job.progress" and event.get("job") in self.jobs:
            rec = self.jobs[event["job"]]
            rec.update({k: data[k] for k in ("api_calls", "tokens", "cost_usd", "cost_unknown") if k in data})
            activity = str(data.get("activity") or "")
            what = data.get("tool") or (render.short(activity, 70) if activity.startswith(PROVIDER_WAIT) else "model")
            when = render.epoch(event.get("time")) or time.time()
            rec["last_activity"] = (when, f"turn {data['turn']} {what}" if data.get("turn") else what)
        if event.get("job") and (event["type"] == "job.progress" or any(k in data for k in PROGRESS_KEYS)):
            self.progress[event["job"]] = {**self.progress.get(event["job"], {}), **data}

    def _trim(self) -> None:
        if len(self.jobs) <= MAX_JOBS:
            return
        finished = sorted((r.get("completed_at") or "", i) for i, r in self.jobs.items() if r.get("status") in TERMINAL)
        for _, job_id in finished[: len(self.jobs) - MAX_JOBS]:
            self.jobs.pop(job_id, None)
            self.progress.pop(job_id, None)

    def approval_of(self, job: str | None) -> dict[str, Any] | None:
        """The oldest pending approval request of ``job`` (None when it waits for none)."""
        return next((r for r in self.approvals.values() if r.get("job") == job), None)

    def approval_lines(self) -> list[str]:
        """A line per pending approval request: id, job, what it runs (``hermesctl approve ID``)."""
        return [f"{r['id']}  {r['job']}  {render.short(render.approval_what(r), 60)}" for r in self.approvals.values()]

    def missing_parents(self) -> list[str]:
        """Parent ids that look like jobs but whose records are not loaded."""
        return sorted({r["parent"] for r in self.jobs.values()
                       if r.get("parent") and r["parent"] not in self.jobs and not r["parent"].startswith("group_")})

    # the tree ------------------------------------------------------------

    def tree(self, width: int | None = None, indent: int = GUIDE_CELLS, toggle: int = TOGGLE_CELLS) -> list[Node]:
        """Sessions → jobs → their children; jobs without session or parent at the top.  At
        every level live jobs come first, in dispatch order, then finished ones, the newest
        first (the last to finish on top; a holder as new as its newest job).  ``width``: the
        cells of the panel, whose tree indents each level by ``indent`` cells and a row with
        children by ``toggle`` more (each row's label then fits its room: :func:`job_label`)."""
        now = time.time()
        waiting = {r.get("job"): r["id"] for r in self.approvals.values()}
        nodes = {i: Node(i, "", i, r.get("status")) for i, r in self.jobs.items()}
        roots: list[Node] = []
        extra: dict[str, Node] = {}

        def holder(key: str, label: str, under: list[Node]) -> Node:
            if key not in extra:
                extra[key] = Node(key, label)
                under.append(extra[key])
            return extra[key]

        for rec in sorted(self.jobs.values(), key=lambda r: (r.get("dispatched_at") or "", r["id"])):
            top = roots
            if rec.get("session"):
                top = holder(f"session:{rec['session']}", f"session {rec['session']}", roots).children
            parent = rec.get("parent")
            if parent in nodes and parent != rec["id"]:
                nodes[parent].children.append(nodes[rec["id"]])
            elif parent and parent != rec.get("session"):
                holder(f"parent:{parent}", parent, top).children.append(nodes[rec["id"]])
            else:
                top.append(nodes[rec["id"]])
        for node in [*nodes.values(), *extra.values()]:
            node.children = self._fold(node.key, self._ordered(node.children))
        roots[:] = self._ordered(roots)

        def label(level: list[Node], depth: int) -> None:
            for node in level:
                if node.job is not None:
                    room = None if width is None else width - indent * depth - (toggle if node.children else 0)
                    node.label = job_label({**self.jobs[node.job], "waits_for": waiting.get(node.job)}, now, room)
                label(node.children, depth + 1)

        label(roots, 0)
        return roots

    def _newest(self, node: Node) -> str:
        """When a finished row ended: its job's ``completed_at`` (else its dispatch), or a holder's newest."""
        if node.job is not None:
            rec = self.jobs[node.job]
            return rec.get("completed_at") or rec.get("dispatched_at") or ""
        return max((self._newest(c) for c in node.children), default="")

    def _ordered(self, level: list[Node]) -> list[Node]:
        """Live rows first as they are (dispatch order), then finished ones, the newest first."""
        return ([c for c in level if is_live(c)]
                + sorted((c for c in level if not is_live(c)), key=self._newest, reverse=True))

    def _fold(self, key: str, children: list[Node]) -> list[Node]:
        """Keep live children and the newest finished ones; fold older finished ones into one last line."""
        finished = [c for c in children if c.status in TERMINAL and not c.children]
        if len(finished) <= MAX_FINISHED_CHILDREN:
            return children
        folded = {c.key for c in finished[MAX_FINISHED_CHILDREN:]}
        counts = Counter(c.status for c in finished if c.key in folded)
        summary = Node(f"folded:{key}", f"… {len(folded)} more finished ("
                       + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")
        return [c for c in children if c.key not in folded] + [summary]

    # caps and batches -----------------------------------------------------

    def caps(self, bar_width: int = 14) -> list[str]:
        """One line per cap: pool name, bar of ``bar_width`` cells, used/limit; then one per
        provider endpoint the governor knows (in flight, and while paused why and who waits);
        then what was spent today (``status``'s ``spend``)."""
        caps = (self.status or {}).get("caps") or {}
        today = ((self.status or {}).get("spend") or {}).get("today") or {}
        spent = [f"spent today: {render.cost_text(today)} ({render.counted(today['calls'], 'call')})"] if today.get("calls") else []
        return [f"{render.short(pool, 16):<16} {bar(use.get('used') or 0, use.get('limit'), bar_width)}"
                for pool, use in caps.items()] + [governor_line(g) for g in (self.status or {}).get("governor") or []] \
            + spent

    def headline(self) -> str:
        """Daemon version, pid, uptime, running/queued counts."""
        st = self.status
        if not st:
            return "hermesd: connecting…"
        return (f"hermesd {st.get('version')} pid {st.get('pid')} up {render.elapsed(st.get('uptime_seconds'))} — "
                f"{st.get('children', 0)} running, {st.get('queued', 0)} queued"
                + (" (stopping)" if st.get("stopping") else ""))

    def batches(self) -> list[str]:
        """A line per batch job: status, processed/total, done/failed/discarded, rate and ETA
        (and, once it ended, its summary on a second line).

        Counts come from the batch's progress events, else from its items' records.
        """
        lines, runs = [], render.run_kinds()
        for rec in self.jobs.values():
            if rec.get("kind") not in runs:
                continue
            prog = self.progress.get(rec["id"], {})
            items = Counter(r.get("status") for r in self.jobs.values() if r.get("parent") == rec["id"])
            done = prog.get("done", items.get("completed", 0))
            failed = prog.get("failed", sum(n for s, n in items.items() if s in TERMINAL - {"completed"}))
            total = prog.get("total")
            count = f"{bar(prog.get('processed', done + failed), total, 16)} " if total else ""
            line = f"{rec['id']}  {rec.get('status')}  {count}{done} done, {failed} failed"
            if prog.get("discarded") is not None:
                line += f", {prog['discarded']} discarded"
            if prog.get("rate_per_minute"):
                line += f", {prog['rate_per_minute']:g}/min"
            if prog.get("eta_seconds") is not None and rec.get("status") not in TERMINAL:
                line += f", ETA {prog['eta_seconds']:.0f}s"
            lines.append(line)
            if rec.get("status") in TERMINAL and rec.get("summary"):
                lines.append(f"  {render.short(rec['summary'], 60)}")
        return lines


def load(conn: Connection, board: Board, backlog: int = BACKLOG_EVENTS) -> Board:
    """Fill ``board`` from the daemon: status, live jobs, pending approval requests, the last
    ``backlog`` events, missing parents."""
    board.status = conn.call("status")
    board.add_jobs(conn.call("ps")["jobs"])
    board.approvals = {r["id"]: r for r in conn.call("approvals.list")["approvals"]}
    start = max(board.last_seq, (board.status.get("last_seq") or 0) - backlog)
    for event in conn.follow(start, follow=False):
        board.apply(event)
    board.add_jobs(fetch_jobs(conn, board.missing_parents()[:50]))
    return board


def fetch_jobs(conn: Connection, ids: Iterable[str]) -> list[dict[str, Any]]:
    """The records of the jobs ``ids`` that exist (best effort: unknown ids are skipped)."""
    found = []
    for job_id in ids:
        try:
            found.append(conn.call("job", id=job_id))
        except ProtocolError:
            continue
    return found


def snapshot_text(board: Board, width: int | None = None) -> str:
    """The board as plain text: headline, caps, batches, the job tree.  ``width``: the columns
    it fits as the live ``top`` does (each job's row keeps its calls and cost, its goal giving up
    its tail first: :func:`job_label`; any line still longer is cut); None: lines whole."""
    lines = [board.headline(), "", "caps:"] + [f"  {c}" for c in board.caps()]
    if board.batches():
        lines += ["", "batches:"] + [f"  {b}" for b in board.batches()]
    if board.approvals:
        lines += ["", "waiting for a person (hermesctl approve ID | deny ID):"]
        lines += [f"  {a}" for a in board.approval_lines()]
    lines += ["", "jobs:"]

    def walk(nodes: list[Node], depth: int) -> None:
        for node in nodes:
            lines.append(" " * SNAPSHOT_INDENT * (depth + 1) + node.label)
            walk(node.children, depth + 1)

    walk(board.tree(None if width is None else width - SNAPSHOT_INDENT, SNAPSHOT_INDENT, 0), 0)
    if not board.jobs:
        lines.append("  (none)")
    return "\n".join(lines if width is None else (line[:width] for line in lines))
