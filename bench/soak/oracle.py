"""The soak's oracle: what must hold once everything has settled, each breach named.

* every job ended exactly once: a terminal state in the store, one terminal ``job.state`` event,
  one ``async_delegation`` notification when it ran in the background; every piece of work the soak
  submitted is a job (none lost, none twice: its idempotency key answered one job), and every
  background job is one the soak submitted (a request asked again made no second);
* a session's errand delivered into its history once; a session's turn in its history once;
* a Kanban task ``done`` once, and every task one the soak submitted (a ``kanban.create`` asked
  again with its idempotency key made no second); a job whose ``write_file`` waits for an approval completed only with it approved;
* every batch prompt in the run's output exactly once (written, or discarded or failed as the
  checkpoint says);
* every terminal command's side effect (a line of the effects file) at most once per completed
  tool call plus once per "effect unknown" result (:data:`child.journal.INTERRUPTED`) of its job;
* the model called at most the ideal number of times (the brain's count of replies written in
  full) plus one per job per restart (of the daemon since it was submitted, or of its child);
* the bill (``usage``) equal to the fake provider's own count of tokens — but for the replies a child
  killed with ``kill -9`` had read in full and not yet reported (the provider charges them; the
  child died before it could say so): at most one per child killed (with its daemon, or alone),
  reported as ``unbilled_calls``.  (State written while the disk is full or ``state.db`` locked for
  longer than a request waits can be lost too: that is a breach.)

:func:`check` returns the breaches (empty: the oracle holds) and the figures.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.soak.brain import DEFAULT_USAGE
from bench.soak.workload import SESSION, Work
from child.journal import INTERRUPTED
from hermesd.contract.states import TERMINAL

TERMINAL_NAMES = {str(getattr(s, "value", s)) for s in TERMINAL}
UNKNOWN_MARK = INTERRUPTED[:60]


def _events(soak: Any, types: list[str]) -> list[dict[str, Any]]:
    events, since = [], 0
    while True:
        page = soak.call("events_since", since=since, types=types, limit=5000)
        events += page["events"]
        if not page["events"] or not page.get("more"):
            return events
        since = page["events"][-1]["seq"]


def _unknown(home: Path, job: str) -> int:
    path = home / "jobs" / job / "journal.jsonl"
    return path.read_text(errors="replace").count(UNKNOWN_MARK) if path.exists() else 0


def _batch_output(run_dir: Path) -> Counter:
    seen: Counter = Counter()
    for path in run_dir.glob("batch_*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                seen[json.loads(line)["prompt_index"]] += 1
    checkpoint = run_dir / "checkpoint.json"
    if checkpoint.exists():
        state = json.loads(checkpoint.read_text())
        for name in ("discarded", "failed"):
            for index in state.get(name) or {}:
                seen[int(index)] += 1
    return seen


def allowance(work: Work, restarts: list[float], killed: Counter) -> int:
    """Model calls beyond the ideal that ``work`` may make: one per restart of the daemon since it was
    submitted, one per kill of its child."""
    return sum(1 for at in restarts if at >= work.at) + killed.get(work.id or "", 0)


def check(soak: Any) -> tuple[list[str], dict[str, Any]]:
    """The breaches of the oracle for the settled ``soak`` (a :class:`bench.soak.Soak`), and figures:
    ``jobs``, ``prompts``, ``lost``, ``duplicated``, ``extra_calls``, ``statuses``."""
    bad: list[str] = []
    jobs = {j["id"]: j for j in soak.jobs()}
    states = _events(soak, ["job.state"])
    ends = Counter(e["job"] for e in states if (e.get("data") or {}).get("status") in TERMINAL_NAMES)
    notes = Counter(e["job"] for e in _events(soak, ["async_delegation"]))
    figures: dict[str, Any] = {"jobs": len(jobs), "prompts": 0, "lost": 0, "duplicated": 0, "extra_calls": 0,
                               "statuses": dict(Counter(f"{j['kind']} {j['status']}" for j in jobs.values()))}
    for job in jobs.values():
        if job["status"] not in TERMINAL_NAMES:
            bad.append(f"job {job['id']} ({job['kind']}) never ended: {job['status']}")
            figures["lost"] += 1
        if ends[job["id"]] != 1:
            bad.append(f"job {job['id']} ({job['kind']}) has {ends[job['id']]} terminal events")
            figures["duplicated"] += ends[job["id"]] > 1
        if job.get("background") and notes[job["id"]] != 1:
            bad.append(f"background job {job['id']} has {notes[job['id']]} completion notifications")
            figures["duplicated"] += notes[job["id"]] > 1
    works = soak.workload.works
    idents = Counter(w.id for w in works if w.kind != "k")
    for ident, count in idents.items():
        if ident is None or ident not in jobs:
            bad.append(f"submitted work {ident} is no job")
            figures["lost"] += 1
        elif count > 1:
            bad.append(f"job {ident} answered {count} different submissions")
    for job in jobs.values():
        if job["kind"] == "background" and job["id"] not in idents:
            bad.append(f"background job {job['id']} ({job['goal'][:60]!r}) was never submitted: a repeat made twice?")
            figures["duplicated"] += 1
    history = soak.call("session.history", session=SESSION)["messages"]
    delivered = Counter(m["notification"] for m in history if m.get("notification"))
    said = Counter()
    for message in history:
        if message.get("role") == "user" and not message.get("notification") and isinstance(message.get("content"), str):
            for w in works:
                if w.kind == "s" and w.ident + " " in message["content"]:
                    said[w.ident] += 1
    tasks = {t["id"]: t for t in soak.call("kanban.list")["tasks"]} if any(
        w.kind == "k" for w in works) else {}
    submitted = {w.id for w in works if w.kind == "k"}
    for task in tasks.values():
        if task["id"] not in submitted:
            bad.append(f"Kanban task {task['id']} ({task['title'][:60]!r}) was never submitted: a repeat made twice?")
            figures["duplicated"] += 1
    effects = Counter(tuple(line.split()) for line in soak.effects.read_text().splitlines()) \
        if soak.effects.exists() else Counter()
    restarts, killed = soak.faults.restarts, soak.faults.killed
    for w in works:
        if w.kind == "e" and delivered[w.id] != 1:
            bad.append(f"errand {w.id} delivered {delivered[w.id]} times into its session")
        if w.kind == "s" and said[w.ident] != 1:
            bad.append(f"session turn {w.ident} is {said[w.ident]} times in the history")
        if w.kind == "a":
            asked = soak.call("approvals.list", state="all", job=w.id)["approvals"]
            figures["approvals"] = figures.get("approvals", 0) + len(asked)
            if jobs.get(w.id, {}).get("status") == "completed" and not any(a["state"] == "approved" for a in asked):
                bad.append(f"job {w.id} ({w.ident}) completed without its write_file approved: {asked}")
        if w.kind == "k":
            task = tasks.get(w.id)
            if task is None or task["status"] != "done":
                bad.append(f"Kanban task {w.id} ({w.ident}) is {task and task['status']}, not done")
        if w.kind in "deg":
            unknown = _unknown(soak.d.home, w.id or "")
            over = sum(count - 1 for (ident, _), count in effects.items() if ident == w.ident and count > 1)
            if over > unknown:
                bad.append(f"job {w.id} ({w.ident}): commands ran {over} times more than once, "
                           f"{unknown} 'effect unknown' results")
                figures["duplicated"] += 1
        if w.kind == "b":
            seen = _batch_output(Path(w.extra["run_dir"]))
            prompts = w.extra["prompts"]
            figures["prompts"] += prompts
            missing = [i for i in range(prompts) if seen[i] == 0]
            twice = [i for i in range(prompts) if seen[i] > 1]
            if missing or twice:
                bad.append(f"batch {w.id}: prompts missing {missing[:10]}, twice {twice[:10]}")
                figures["lost"] += len(missing)
                figures["duplicated"] += len(twice)
            calls = {i: soak.brain.calls[f"{w.ident}{i}"] for i in range(prompts)}
            extra = sum(max(0, c - 1) for c in calls.values())
            figures["extra_calls"] += extra
            over = [i for i, c in calls.items() if c > 1 + allowance(w, restarts, killed)]
            if over:
                bad.append(f"batch {w.id}: prompts {over[:10]} called the model more than once per restart")
            continue
        made = soak.brain.calls[w.ident]
        figures["extra_calls"] += max(0, made - w.ideal)
        limit = w.ideal + allowance(w, restarts, killed) + (
            max(0, (tasks.get(w.id) or {}).get("attempts", 1) - 1) if w.kind == "k" else 0)
        if made > limit:
            bad.append(f"{w.ident} ({w.id}): {made} model calls, at most {limit} allowed")
    bill = soak.call("usage", by="model")["total"]
    paid = soak.brain.tokens
    short = (paid["input"] - (bill.get("input") or 0), paid["output"] - (bill.get("output") or 0))
    one = (DEFAULT_USAGE["input_tokens"], DEFAULT_USAGE["output_tokens"])
    unbilled = short[0] // one[0] if short[0] >= 0 and short[0] % one[0] == 0 else -1
    figures["bill"] = {"input": bill.get("input"), "output": bill.get("output"), "provider": dict(paid),
                       "unbilled_calls": unbilled}
    if short != (unbilled * one[0], unbilled * one[1]) or unbilled > soak.faults.in_flight_killed:
        bad.append(f"bill {bill.get('input')} input / {bill.get('output')} output tokens, the provider counted "
                   f"{paid['input']} / {paid['output']} ({soak.faults.in_flight_killed} jobs were running in "
                   f"processes killed with kill -9, which may each lose the usage of the reply they were reading)")
    return bad, figures


__all__ = ["allowance", "check"]
