"""Output for people and for programs.

With ``--json`` a command prints one JSON object per result (one per line for
lists and streams) and errors as ``{"error": {"code", "message"}}`` on stdout.
Without it, plain text and tables (``rich``), never colours when stdout is not
a terminal — so cron mail stays readable.
"""

from __future__ import annotations

import os
import sys
import time

from hermesd.paths import plugin_modules
from hermesd.protocol import counted, one_line  # noqa: F401  (counted: the clients' render.counted)

TYPE_CHECKING = False  # as hermesd.protocol's: typing is not imported
if TYPE_CHECKING:
    from typing import Any, Iterable


def clean(text: Any) -> str:
    """``text`` safe for a terminal: every control character but newline and tab
    (BEL, CR, ESC, DEL, C1 codes…) is shown escaped (``\\x07``), so a goal, a
    reply or a log cannot ring, rewrite or recolour the screen."""
    return escaped(text, keep="\n\t")


def escaped(text: Any, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` shown escaped (``\\x1b``,
    ``\\x0a``…): a line of a table shows even its newlines as text."""
    text = str(text if text is not None else "")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text)


def value_text(value: Any) -> str:
    """A field value for people: lists comma-separated, maps as ``k=v``, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={value_text(v)}" for k, v in value.items()) or "(none)"
    return str(value)


def fields_text(obj: dict[str, Any]) -> str:
    """A map as ``key: value`` lines (unset values left out)."""
    return "\n".join(f"{key}: {value_text(value)}" for key, value in obj.items() if value is not None)


def elapsed(seconds: float | None) -> str:
    """``42s``, ``3m20s``, ``1h02m`` (``-`` when unknown)."""
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else (f"{rest // 60}m{rest % 60:02d}s" if rest >= 60 else f"{rest}s")


def running_for(rec: dict[str, Any], now: float | None = None) -> float | None:
    """A job's duration in seconds: its final one, or for a live job the time since it started."""
    if isinstance(rec.get("duration_seconds"), (int, float)):
        return float(rec["duration_seconds"])
    if rec.get("status") not in ("starting", "running"):
        return None  # before reading started_at: a queued job's None costs a ValueError to parse
    begun = epoch(rec.get("started_at"))
    if begun is None:
        return None
    return max(0.0, (now if now is not None else time.time()) - begun)


def epoch(iso: Any) -> float | None:
    """An ISO 8601 time (``2026-01-01T00:00:00.000Z``) as Unix seconds; None when unreadable."""
    from datetime import datetime, timezone

    try:
        stamp = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


def emit_json(obj: Any) -> None:
    """Print one JSON object on one line and flush."""
    import json  # here: a client that prints no JSON does not pay for its import

    print(json.dumps(obj, ensure_ascii=False, default=str), flush=True)


def console():
    """A rich console on stdout; no colour or markup effects unless stdout is a TTY."""
    from rich.console import Console

    return Console(no_color=not sys.stdout.isatty(), highlight=False, soft_wrap=True)


def short(text: Any, width: int = 60) -> str:
    """One line of at most ``width`` printable characters (control characters become spaces)."""
    return one_line(text, width)


def remaining(until: Any, told: Any) -> float:
    """Seconds left now until epoch ``until`` (never below 0), else ``told`` (a reply without it)."""
    if isinstance(until, (int, float)):
        return max(0.0, until - time.time())
    return told if isinstance(told, (int, float)) else 0.0


def waiting_text(rec: dict[str, Any]) -> str:
    """``[waiting 4.0s for the provider: REASON] `` for a job the governor told to wait (the time
    left as it is shown, counting down to ``until``), else ``""``."""
    waiting = rec.get("waiting")
    if not isinstance(waiting, dict):
        return ""
    left = remaining(waiting.get("until"), waiting.get("seconds"))
    return f"[waiting {left:.1f}s for {waiting.get('endpoint')}: {waiting.get('reason')}] "


STATE_COLOURS = {"queued": "33", "starting": "36", "running": "36", "completed": "32", "failed": "31",
                 "timed_out": "31", "lost": "31", "interrupted": "35", "cancelled": "35"}
"""SGR colour of each job state (ECMA-48: 31 red, 32 green, 33 yellow, 35 magenta, 36 cyan)."""


def colour_on() -> bool:
    """True when stdout is a terminal that takes colour: not with ``NO_COLOR`` set to anything
    (https://no-color.org) or ``TERM=dumb``, never into a pipe or a file."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def state_cell(status: str, width: int, colour: bool) -> str:
    """A job state padded to ``width``, in its :data:`STATE_COLOURS` colour when ``colour``."""
    cell = status.ljust(width)
    code = STATE_COLOURS.get(status)
    return f"\033[{code}m{status}\033[0m{cell[len(status):]}" if colour and code else cell


def terminal_columns() -> int | None:
    """The terminal's width: ``COLUMNS``, else stdout's terminal's, else None (stdout is no terminal:
    a pipe, a file, cron's mail, where lines stay whole, as procps ``ps`` does); without importing
    shutil (a fast ``ps`` would pay for it)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or None


def jobs_table(records: Iterable[dict[str, Any]]) -> None:
    """Print job records as a table: id, kind, status, age/duration, calls, goal.

    Every column but GOAL keeps its full width (an id must stay usable when
    copied); GOAL takes what is left of the terminal (at least 20 characters)
    and is cut with an ellipsis — on a terminal or with ``COLUMNS`` set; else
    (a pipe, a file) it is whole (:func:`terminal_columns`).
    """
    head = ("ID", "KIND", "STATUS", "DURATION", "CALLS", "COST")
    rows = []
    for rec in records:
        dur = running_for(rec)
        status = (rec.get("status") or "") + (f" (resumed {rec['resumes']})" if rec.get("resumes") else "")
        rows.append(((rec["id"], rec.get("kind") or "", status,
                      f"{dur:.1f}s" if dur is not None else "-", str(rec.get("api_calls") or 0), cost_text(rec)),
                     waiting_text(rec) + worktree_tag(rec) + mcp_tag(rec) + (rec.get("goal") or "")))
    widths = [max([len(col), *(len(cells[i]) for cells, _ in rows)]) for i, col in enumerate(head)]
    columns = terminal_columns()
    goal_width = max(20, columns - sum(widths) - 2 * len(widths) - 1) if columns else None

    colour = colour_on()

    def line(cells: tuple[str, ...], goal: str, head: bool = False) -> str:
        padded = [c.ljust(w) if i != 2 or head else state_cell(c, w, colour)
                  for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(padded) + "  " + goal

    print(line(head, "GOAL", head=True))
    for cells, goal in rows:
        goal = escaped(goal)  # as `events` and `job` show it: what is there, never what it would do
        print(line(cells, goal if goal_width is None or len(goal) <= goal_width
                   else goal[:goal_width - 1] + "…").rstrip())


def slash_text(answer: dict[str, Any]) -> str:
    """The answer of a slash command (``session.send`` with ``/…``) as readable lines."""
    command = answer.get("command")
    if command == "background":
        paused = "; the queue is paused: it starts after hermesctl resume" if answer.get("queue_paused") else ""
        return (f"background task {answer.get('delegation_id')} {answer.get('status')}{paused}; its result comes "
                "back as a new turn")
    if command == "stop":
        stopped = answer.get("stopped") or []
        return f"stopped {', '.join(stopped)}" if stopped else "nothing to stop"
    if command == "tasks":
        tasks = answer.get("tasks") or []
        return "\n".join(f"{t['id']}  {t.get('status')}  {short(t.get('goal'), 60)}" for t in tasks) or "no tasks"
    if command == "help":
        return "\n".join(str(c) for c in answer.get("commands") or [])
    if command == "compact":
        job = answer.get("compaction") or {}
        return (f"compaction {job.get('id')} {job.get('status')}: the older turns are summarised before the next "
                "turn (every message stays in the history)")
    return fields_text(answer)


def status_text(st: dict[str, Any]) -> str:
    """The daemon's ``status`` reply for people: pid, uptime, children, caps, job counts, start method,
    where its state and sockets are (``hermesctl status``)."""
    lines = [f"hermesd {st['version']} pid {st['pid']} up {st['uptime_seconds']:.0f}s"
             f"{' (stopping)' if st['stopping'] else ''}",
             f"  children: {st['children']} running, {st['queued']} queued"]
    lines += [f"  cap {pool}: {use['used']}/{use['limit'] if use['limit'] is not None else '-'}"
              for pool, use in st["caps"].items()]
    queue = st.get("queue") or {}
    if queue.get("paused"):
        lines.append(f"  queue: PAUSED since {queue.get('paused_at')} (hermesctl resume)")
    if queue.get("waiting_for_jobs"):
        lines.append(f"  waiting for other jobs (--after): {queue['waiting_for_jobs']}")
    if (st.get("hooks") or {}).get("on_job_end"):
        lines.append("  hooks: on_job_end set")
    lines += governor_lines(st.get("governor") or [])
    spend = st.get("spend") or {}
    if spend.get("today"):
        today = spend["today"]
        limits = [f"limit ${spend['daily_cost_usd']:g}" if spend.get("daily_cost_usd") else "",
                  f"limit {spend['daily_tokens']} tokens" if spend.get("daily_tokens") else ""]
        lines.append(f"  spent today: {counted(today['calls'], 'model call')}, tokens {tokens_text(today)}, cost "
                     f"{cost_text(today)}" + "".join(f", {limit}" for limit in limits if limit))
    lines += ["  jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(st["jobs"].items())) or "none"),
              f"  start: {start_method(st.get('start') or {})}",
              f"  state: {st['state_db']}  runtime: {st['runtime_dir']}"]
    return clean("\n".join(lines))


def governor_lines(limiters: list[dict[str, Any]]) -> list[str]:
    """``status``'s ``governor`` as lines: each endpoint's calls in flight and window, and while
    paused or any job waits how long (left now), why and who waits."""
    lines = []
    for g in limiters:
        line = f"  provider {g.get('endpoint')}: {g.get('in_flight', 0)} in flight (window {g.get('concurrency')})"
        if g.get("reason"):
            line += f", PAUSED {remaining(g.get('paused_until'), g.get('paused_seconds')):.1f}s: {g.get('reason')}"
        if g.get("waiting"):
            line += f"; waiting: {', '.join(g['waiting'])}"
        lines.append(line)
    return lines


def hello_text(h: dict[str, Any]) -> str:
    """The daemon's ``hello`` reply for people: its fields, the ops counted (``hermesctl hello``)."""
    return clean(fields_text({**h, "ops": None}) + f"\nops: {len(h['ops'])} (hermesctl --json hello lists them)")


def start_method(start: dict[str, Any]) -> str:
    """``status``'s ``start`` as a phrase: ``spawn``, or ``forkserver (zygote 123, 2 spare(s) held;
    starts: 40 warm, 2 cold)``, or ``forkserver (no zygote: <why children start cold>, 0 spare(s)
    held; …)``."""
    method = start.get("method") or "spawn"
    if method != "forkserver":
        return method
    zygote = f"zygote {start['zygote']}" if start.get("zygote") else "zygote warming up"
    if start.get("cold_reason"):
        zygote = f"no zygote: {start['cold_reason']}"
    starts = start.get("starts") or {}
    counted = f"; starts: {starts.get('warm', 0)} warm, {starts.get('cold', 0)} cold" if starts else ""
    return f"{method} ({zygote}, {start.get('spares', 0)} spare(s) held{counted})"


def job_text(rec: dict[str, Any]) -> str:
    """A job record as readable lines."""
    tokens = rec.get("tokens") or {}
    lines = [f"{rec['id']}  {rec.get('kind')}  {rec.get('status')}"
             + (f" ({rec.get('exit_reason')})" if rec.get("exit_reason") else "")]
    for key in ("goal", "context", "model", "session", "parent", "dispatched_at", "started_at", "completed_at"):
        if rec.get(key):
            lines.append(f"  {key}: {rec[key]}")
    if rec.get("toolsets"):
        lines.append(f"  toolsets: {', '.join(rec['toolsets'])}")
    if rec.get("duration_seconds") is not None:
        lines.append(f"  duration: {rec['duration_seconds']:.2f}s")
    if isinstance(rec.get("waiting"), dict):
        lines.append(f"  {waiting_text(rec).strip()}")
    if rec.get("resumes"):
        lines.append(f"  resumed: {counted(rec['resumes'], 'time')} after a restart, last at {rec.get('resumed_at')}")
    lines.append(f"  api_calls: {rec.get('api_calls') or 0}  tokens: {tokens_text(tokens)}  cost: {cost_text(rec)}")
    if rec.get("tree_usage"):
        tree = rec["tree_usage"]
        lines.append(f"  with its subagents: tokens: {tokens_text(tree)}  cost: {cost_text(tree)}")
    lines += [f"  {line}" for line in worktree_lines(rec.get("worktree"))]
    lines += [f"  {line}" for line in mcp_lines(rec.get("mcp"))]
    if rec.get("error"):
        lines.append(f"  error: {rec['error']}")
    if rec.get("summary"):
        lines.append("  result:")
        lines += [f"    {line}" for line in str(rec["summary"]).splitlines()]
    if "trajectory" in rec:
        lines += ["  trajectory:", trajectory_text(rec["trajectory"])]
    return "\n".join(lines)


def mcp_lines(servers: Any) -> list[str]:
    """The MCP servers a job used (its record's ``mcp``), one line each: ``mcp: time (stdio) ready,
    2 tools, 3 calls, 1 failed``, then why one failed."""
    if not isinstance(servers, dict):
        return []
    return [f"mcp: {one_line(name)} ({s.get('transport')}) {s.get('state')}, {counted(s.get('tools'), 'tool')}, "
            f"{counted(s.get('calls'), 'call')}" + (f", {s['failures']} failed" if s.get("failures") else "")
            + (f": {one_line(s['error'], 200)}" if s.get("error") else "")
            for name, s in servers.items() if isinstance(s, dict)]


def mcp_tag(rec: dict[str, Any]) -> str:
    """``[mcp git failed] `` before the goal in ``ps`` for each MCP server of the job that did not start
    or crashed (not one the job's own stop ended: ``stopped``, ``closed``)."""
    servers = rec.get("mcp") if isinstance(rec.get("mcp"), dict) else {}
    bad = [f"{name} {s.get('state')}" for name, s in servers.items()
           if isinstance(s, dict) and s.get("state") not in ("ready", "stopped", "closed")]
    return f"[mcp {', '.join(bad)}] " if bad else ""


def worktree_lines(worktree: Any) -> list[str]:
    """A job's git worktree (its record's ``worktree``) for people: ``worktree: PATH (branch B,
    kept)``, then its changed files and commits; ``worktree: removed (no changes)`` once it was
    removed, ``worktree: none was made ...`` when the job ended before making it; none for a job
    without one."""
    if not isinstance(worktree, dict):
        return []
    state = worktree.get("state") or ("no changes" if worktree.get("changed") is False else
                                      "kept" if worktree.get("changed") else "in use")
    if worktree.get("made") is False:
        return [f"worktree: none was made (the job ended before creating {worktree.get('path')})"]
    if state in ("removed", "no changes"):
        return [f"worktree: removed with its branch {worktree.get('branch')} (no changes)"]
    lines = [f"worktree: {worktree.get('path')} (branch {worktree.get('branch')}, {state})"]
    if worktree.get("changed_files"):
        lines.append(f"  {counted(worktree['changed_files'], 'changed file')}: "
                     + ", ".join(one_line(c) for c in (worktree.get("changes") or [])[:10])
                     + (" …" if worktree["changed_files"] > 10 else ""))
    if worktree.get("commit_count"):
        lines.append(f"  {counted(worktree['commit_count'], 'commit')}:")
        lines += [f"    {c.get('id', '')[:12]} {one_line(c.get('subject') or '')}" for c in worktree.get("commits") or []]
    if worktree.get("error"):
        lines.append(f"  git: {one_line(worktree['error'])}")
    return lines


def worktree_tag(rec: dict[str, Any]) -> str:
    """``[hermes/ID] `` before a job's goal in ``ps`` while its worktree is kept or in use ('' else)."""
    worktree = rec.get("worktree")
    if not isinstance(worktree, dict) or worktree.get("state") == "removed" or worktree.get("changed") is False:
        return ""
    return f"[{worktree.get('branch')} {worktree.get('path')}] "


def cost_text(rec: dict[str, Any]) -> str:
    """A record's ``cost_usd`` for people: ``$0.0123``; ``unknown`` (no price for its model, so
    never a made-up 0) or ``$0.0123 + unknown`` when some of it had no price; ``$0`` for tokens that
    cost nothing (a local model); ``-`` without tokens."""
    cost, unknown = float(rec.get("cost_usd") or 0.0), bool(rec.get("cost_unknown"))
    if unknown:
        return f"${cost:.4f} + unknown" if cost else "unknown"
    tokens = rec.get("tokens") if isinstance(rec.get("tokens"), dict) else rec
    if not cost:
        return "$0" if any(tokens.get(k) for k in ("input", "output")) else "-"
    return f"${cost:.4f}"


def tokens_text(tokens: dict[str, Any]) -> str:
    """``1200 in (800 cache read, 100 cache write) / 50 out``."""
    cache = [f"{tokens[k]} cache {k[6:]}" for k in ("cache_read", "cache_write") if tokens.get(k)]
    return (f"{tokens.get('input', 0)} in" + (f" ({', '.join(cache)})" if cache else "")
            + f" / {tokens.get('output', 0)} out")


def trajectory_text(turns: Any) -> str:
    """A ShareGPT trajectory (``[{from, value}]``) as readable blocks, one per turn."""
    if not turns:
        return "  (no trajectory recorded)"
    if isinstance(turns, dict):
        turns = turns.get("conversations") or []
    lines = []
    for turn in turns:
        lines.append(f"  [{turn.get('from')}]")
        lines += [f"    {line}" for line in str(turn.get("value") or "").splitlines()]
    return "\n".join(lines)


_displays: list[Any] = []


def _plugin_says(hook: str, etype: str, data: dict[str, Any]) -> str | None:
    """What the job types' ``display`` modules (:func:`hermesd.paths.plugin_modules`: how their
    events read, e.g. ``hermesd/kanban/display.py``) say of an event of theirs: the first answer
    of their ``hook`` (``what``, ``subject``), None when none has one.  Imported at the first
    event that is no core one, so a client that shows none never imports them."""
    for module in displays():
        if (said := getattr(module, hook, None)) is not None and (text := said(etype, data)) is not None:
            return text
    return None


def displays() -> list[Any]:
    """The job types' ``display`` modules (found by file: :func:`hermesd.paths.plugin_modules`),
    imported at the first call."""
    if not _displays:
        import importlib

        _displays.extend(importlib.import_module(name) for name in plugin_modules("display"))
    return _displays


def run_kinds() -> set[str]:
    """The job kinds whose jobs are runs of many items (a batch), which ``top``'s board shows with
    their progress: each job type's ``display`` leaf says which of its kinds are (``RUNS``)."""
    return {kind for module in displays() for kind in getattr(module, "RUNS", ())}


def _core(etype: str) -> bool:
    """Whether event type ``etype`` is shown here, not by a job type's display: the core's own
    (``job.*``, ``daemon.*``, ``events.*``) and ``async_delegation`` (its block is the event's text, see
    :func:`event_text`; a script's ``events --since`` after delegations imports no display)."""
    return etype.startswith(("job.", "daemon.", "events.")) or etype == "async_delegation"


def event_subject(event: dict[str, Any]) -> str:
    """What an event is about: what its job type's display says (a Kanban event: its task), else
    its job, task, session or profile (``hermesd`` for the daemon's own events), else ``-``."""
    data, etype = event.get("data") or {}, event["type"]
    if etype.startswith("daemon."):
        return "hermesd"
    if not _core(etype) and (said := _plugin_says("subject", etype, data)) is not None:
        return said
    return str(event.get("job") or data.get("task") or event.get("session") or data.get("name") or "-")


def event_what(event: dict[str, Any]) -> str:
    """The one-line gist of an event's data (empty when it has none worth showing)."""
    data, etype = event.get("data") or {}, event["type"]
    if etype == "job.state":
        return f"{data.get('previous')} -> {data.get('status')}"
    if etype == "job.progress":
        return f"turn {data.get('turn')} {data.get('tool') or ''}".rstrip()
    if etype == "daemon.reloaded":
        return f"from {data.get('source') or '(defaults)'}" + (
            f"; restart needed for {', '.join(data['restart_needed'])}" if data.get("restart_needed") else "")
    if etype in ("daemon.started", "daemon.stopped"):
        return f"pid {data.get('pid')}" + (f" version {data['version']}" if data.get("version") else "")
    if not _core(etype) and (said := _plugin_says("what", etype, data)) is not None:
        return said
    for key in ("error", "reason", "description", "status"):
        if data.get(key):
            return short(data[key], 160)
    return ""


def event_text(event: dict[str, Any]) -> str:
    """One event as one line: seq, time, type, subject, gist (``async_delegation``
    events with their block below)."""
    head = f"{event['seq']:>6} {event['time']} {event['type']:<18} {event_subject(event):<8}"
    if event["type"] == "async_delegation":
        return f"{head}\n{(event.get('data') or {}).get('block', '')}"
    if event["type"] == "events.removed":
        data = event.get("data") or {}
        return f"{head} events {data.get('since', 0) + 1}..{event['seq']} were removed by retention"
    return f"{head} {event_what(event)}".rstrip()


def approval_what(request: dict[str, Any]) -> str:
    """What an approval request would run: its command, else its tool and arguments."""
    arguments = request.get("arguments") if isinstance(request.get("arguments"), dict) else {}
    command = arguments.get("command")
    return command if isinstance(command, str) else f"{request.get('tool')} {short(arguments, 200)}"
