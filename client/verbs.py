"""The commands scripts call, defined once: ``status``, ``hello``, ``delegate``, ``ps``,
``result``, ``wait``, ``cancel``, ``events``.

Each command is a :class:`Verb`: its parameters (:class:`Opt`, :class:`Arg`) and its
body, a function of a :class:`Session` and the parameters' values.  Two front ends run
the same body: :mod:`client.ctl` makes a click command of each (``--help``, shell
completion, click's usage errors), and :mod:`client.fast` parses the command line itself
and runs the body without importing click or pyzmq.  What the body prints, the requests
it makes and the errors it reports are thus the same on both paths; a body raises
:class:`Usage` for a bad command line (click shows it; the fast path leaves the command
to click).  Nothing here imports click, pyzmq or json at module level.
"""

from __future__ import annotations

import importlib
import os
import sys

from client import render
from client.calls import GAP_EVENT, Away
from hermesd.protocol import EXIT_CODES, ProtocolError

TYPE_CHECKING = False  # as hermesd.protocol's: typing is not imported
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, as shells report it)."""


class Usage(Exception):
    """A bad command line found by a command's body: ``message``, and ``hint`` (the option it is
    about, e.g. ``--env``) or None.  click shows it as its own usage error (exit 2)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class Opt:
    """One option of a command.

    ``flag``: ``--name`` (``short``: ``-n`` too); ``kind``: ``flag``, ``str``, ``int1`` (an
    integer ≥ 1), ``int0`` (an integer ≥ 0), ``int``, ``float``, ``float0`` (a number ≥ 0), ``choice`` (one of ``choices``),
    ``dir`` (an existing directory), ``file`` (a file to read, ``-`` standard input);
    ``choices``: the values a ``choice`` may take, as ``module.NAME`` of :mod:`hermesd.contract`
    (imported when needed: the contract's import costs more than a fast command may);
    ``dest``: the body's parameter (default from the flag); ``multiple``: repeatable,
    the values as a tuple; ``slow``: the fast path leaves a command line that gives it to
    the full client (it needs what only that one has: a subscription, a terminal, a file)."""

    def __init__(self, flag: str, kind: str = "str", help: str | None = None, *, dest: str | None = None,
                 short: str | None = None, choices: str | None = None, multiple: bool = False,
                 metavar: str | None = None, slow: bool = False):
        self.flag, self.kind, self.help, self.short = flag, kind, help, short
        self.dest = dest or flag.lstrip("-").replace("-", "_")
        self.choices_name, self.multiple, self.metavar = choices, multiple, metavar
        self.slow = slow or kind == "file"

    def choices(self) -> tuple[str, ...]:
        """The values a ``choice`` may take."""
        module, _, name = (self.choices_name or "").rpartition(".")
        return tuple(getattr(importlib.import_module(f"hermesd.contract.{module}"), name))

    def default(self) -> Any:
        """The value the body gets when the option is not given (click's defaults)."""
        return () if self.multiple else (False if self.kind == "flag" else None)


class Arg:
    """A positional argument: ``name`` (the body's parameter), ``required``; ``job``: a job id
    (click completes it from the daemon's jobs)."""

    def __init__(self, name: str, required: bool = True, job: bool = False):
        self.name, self.required, self.job = name, required, job

    def default(self) -> Any:
        """None: not given."""
        return None


class Verb:
    """A command: ``name``, its ``params`` (in the order ``--help`` lists them) and its
    ``body(session, **values)``."""

    def __init__(self, name: str, params: tuple[Opt | Arg, ...], body: Callable[..., None]):
        self.name, self.params, self.body = name, params, body

    def option(self, flag: str) -> Opt | None:
        """The option spelled ``flag`` (``--name`` or its short form), None if it has none."""
        return next((p for p in self.params if isinstance(p, Opt) and flag in (p.flag, p.short)), None)

    def in_flags(self, err: ProtocolError) -> ProtocolError:
        """``err`` as the person typed it: a refused argument (its ``details.field``, the body's
        parameter of one of this command's options) named by its flag (``argument 'memory_limit_mb'
        must be ...`` → ``--memory-limit must be ...``); any other error as it is."""
        field = err.details.get("field")
        opt = next((p for p in self.params if isinstance(p, Opt) and p.dest == field), None)
        if opt is None:
            return err
        message = err.message.replace(f"argument {field!r}", opt.flag).replace(repr(field), opt.flag)
        return ProtocolError(err.code, message, err.details)


class Session:
    """What a body reaches the daemon and the person through (one per invocation).

    ``conn``: a :class:`client.calls.Calls`; ``json``: ``--json`` given; ``prog``: the name
    errors begin with.  Subclasses: :class:`client.common.ClickSession`, :class:`client.fast.FastSession`."""

    prog = "hermesctl"

    @property
    def conn(self) -> Any:
        """The invocation's connection (made on first use)."""
        raise NotImplementedError

    @property
    def json(self) -> bool:
        """True when ``--json`` was given."""
        raise NotImplementedError

    def echo(self, text: str, *, nl: bool = True, err: bool = False) -> None:
        """Write ``text`` as it is (and a newline unless ``nl`` is false) to stdout or stderr, flushed."""
        stream = sys.stderr if err else sys.stdout
        stream.write(text + ("\n" if nl else ""))
        stream.flush()

    def out(self, text: Any = "", *, nl: bool = True, err: bool = False) -> None:
        """Print text for people, control characters escaped (:func:`render.clean`)."""
        self.echo(render.clean(text), nl=nl, err=err)

    def fail(self, code: str, message: str) -> None:
        """Report an error (stderr, and JSON on stdout with ``--json``) and exit with its code."""
        if self.json:
            render.emit_json({"error": {"code": code, "message": message}})
        self.out(f"{self.prog}: {message}", err=True)
        sys.exit(EXIT_CODES.get(code, 1))

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Block until job ``job_id`` is terminal and return its record (``timeout`` seconds, then exit 9)."""
        raise NotImplementedError

    def stopped_watching(self, job_id: str, follow: str | None = None, cancel: str | None = None) -> None:
        """After Ctrl-C on a foreground wait: say what goes on and how to reach it, exit 130."""
        follow = follow or f"hermesctl wait {job_id}"
        cancel = cancel or f"hermesctl cancel {job_id}"
        self.echo(f"\nstopped watching; {job_id} goes on in hermesd (follow: {follow}; stop: {cancel})", err=True)
        sys.exit(INTERRUPTED)


# -- what several bodies share ---------------------------------------------------------------------


def show(s: Session, obj: dict[str, Any], text: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print one result: JSON with ``--json``, else ``text(obj)`` or readable key: value lines."""
    if s.json:
        render.emit_json(obj)
    else:
        s.out(text(obj) if text is not None else render.fields_text(obj))


def take(s: Session, items: Iterator[Any], limit: int | None, what: str) -> list[Any]:
    """The first ``limit`` of ``items`` (all when None), with a note on stderr when more exist."""
    taken = []
    for item in items:
        if limit is not None and len(taken) == limit:
            s.out(f"hermesctl: more {what} exist than --limit {limit} shows", err=True)
            break
        taken.append(item)
    return taken


IDEMPOTENCY_HELP = ("Make the request idempotent: sent again with the same KEY (after a timeout, by a retrying "
                    "script), it returns the job (or Kanban task) the first one made instead of making another.")


def said_repeat(s: Session, answer: dict[str, Any], job_id: str) -> None:
    """On stderr, for people: ``answer`` is a repeat (``repeat: true``), job ``job_id`` the first one's."""
    if answer.get("repeat") and not s.json:
        s.out(f"{job_id}: submitted before with this idempotency key; not started again", err=True)


def exit_for(record: dict[str, Any]) -> None:
    """Exit 10 (``job_failed``) unless the job completed."""
    if record.get("status") != "completed":
        sys.exit(EXIT_CODES["job_failed"])


def working_dir(s: Session) -> str:
    """The current directory (a request's default ``cwd``); exits cleanly (``bad_request``,
    status 2) when the shell's directory was deleted under it."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        s.fail("bad_request", "the current directory no longer exists; cd elsewhere or pass --cwd")
        raise  # not reached: fail() exits


def split(value: str | None) -> list[str] | None:
    """``"a, b,c"`` → ``["a", "b", "c"]``; None or empty → None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def toolset_names(value: str | None) -> list[str] | None:
    """``--toolsets``: the names (:func:`split`), None when not given; raises :class:`Usage`
    for a value that names none (``--toolsets ""``), which would silently mean the default."""
    names = split(value)
    if value is not None and not names:
        from hermesd.contract.toolsets import TOOLSETS

        raise Usage(f"--toolsets names no toolset; give some of {', '.join(TOOLSETS)} "
                    "(comma-separated), or leave it out for the config's")
    return names


def read_text(value: str | None, file: Any, name: str) -> str:
    """The text given as argument ``name`` (``-``: standard input) or by ``--NAME-file``; text
    read (from standard input or a file) without its trailing whitespace — the newline a file or
    ``echo`` ends with —, its start and inner lines as they are; an argument as typed.  Raises
    :class:`Usage` when neither or both are given."""
    if (value is None) == (file is None):
        raise Usage(f"give {name.upper()} or --{name}-file (not both); '-' reads standard input")
    if file is None and value != "-":
        return value
    return (sys.stdin if file is None else file).read().rstrip()


def env_pairs(pairs: tuple[str, ...], option: str = "--env") -> dict[str, str | None]:
    """``("A=1", "B=x=y", "C")`` → ``{"A": "1", "B": "x=y", "C": None}`` (a name alone: the
    daemon's variable of that name); raises :class:`Usage` for an empty name."""
    env: dict[str, str | None] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not name:
            raise Usage(f"{pair!r} is not NAME=VALUE or NAME", option)
        env[name] = value if sep else None
    return env


def json_file(file: Any, option: str) -> Any:
    """The JSON value in ``file`` (None for None); raises :class:`Usage` naming the line."""
    if file is None:
        return None
    import json

    try:
        return json.loads(file.read())
    except ValueError as exc:
        raise Usage(f"{file.name}: not JSON: {exc}", option) from None


# -- the commands ----------------------------------------------------------------------------------

JSON_HELP = "Machine-readable output: one JSON object per line."
JOB = Arg("job_id", job=True)


def oldest_first() -> Opt:
    """``--oldest-first``: the order scripts want (people get the newest first)."""
    return Opt("--oldest-first", "flag", "Oldest first (default: newest first).")


def limit(what: str) -> Opt:
    """``--limit N``: show at most N (default: all, page after page)."""
    return Opt("--limit", "int1", f"Show at most this many {what} (default: all); says so when more exist.")


def status(s: Session) -> None:
    """Daemon status: pid, uptime, caps and how full they are, job counts."""
    show(s, s.conn.call("status"), render.status_text)


def hello(s: Session) -> None:
    """Print the daemon's version, protocol version, pid and capabilities."""
    show(s, s.conn.call("hello"), render.hello_text)


def ps(s: Session, show_all: bool, kind: str | None, oldest_first: bool, limit: int | None) -> None:
    """List running and queued jobs (or every job with --all), newest first."""
    args: dict[str, Any] = {"all": show_all, "order": "oldest" if oldest_first else "newest"}
    if kind:
        args["kind"] = kind
    records = take(s, s.conn.jobs(**args), limit, "jobs")
    if s.json:
        for rec in records:
            render.emit_json(rec)
    elif records:
        render.jobs_table(records)
    else:
        s.out("no jobs" if show_all else "no running or queued jobs")


def delegate(s: Session, goal: str | None, goal_file: Any, background: bool, queue: bool, context: str | None,
             toolsets: str | None, model: str | None, provider: str | None, role: str | None, max_turns: int | None,
             cwd: str | None, timeout_seconds: float | None, after: str | None, env: tuple[str, ...],
             secret: tuple[str, ...], output_schema: Any, image: str | None, no_resume: bool, worktree: bool,
             idempotency_key: str | None,
             max_cost_usd: float | None, max_tokens: int | None, **resources: int | None) -> None:
    """Hand GOAL to a subagent ('-' or --goal-file: read it).  Foreground: wait, showing
    that it waits on a terminal, and print the result (Ctrl-C stops watching; the
    job goes on).  --background: print the job record (id, status) at once.
    While the queue is paused (hermesctl pause) the job is accepted and waits."""
    if queue and not background:
        raise Usage("--queue needs --background (a foreground delegation waits for its result anyway)")
    goal = read_text(goal, goal_file, "goal")
    args: dict[str, Any] = {"goal": goal, "background": background, "queue": queue,
                            "cwd": os.path.abspath(cwd or working_dir(s))}
    for key, value in (("context", context), ("toolsets", toolset_names(toolsets)), ("model", model),
                       ("provider", provider), ("role", role), ("max_turns", max_turns), ("image", image),
                       ("timeout_seconds", timeout_seconds), ("after", split(after)),
                       ("env", env_pairs(env) or None), ("secrets", env_pairs(secret, "--secret") or None),
                       ("output_schema", json_file(output_schema, "--output-schema")),
                       ("resume", False if no_resume else None), ("worktree", True if worktree else None),
                       ("idempotency_key", idempotency_key),
                       ("max_cost_usd", max_cost_usd), ("max_tokens", max_tokens), *resources.items()):
        if value is not None:
            args[key] = value
    try:
        record = s.conn.call("delegate", **args)
    except ProtocolError as err:
        raise VERBS["delegate"].in_flags(err) from None
    said_repeat(s, record, record["id"])
    if record.get("queue_paused") and not s.json:
        s.out(f"{record['id']} queued: the queue is paused (hermesctl resume)", err=True)
    if background:
        return show(s, record, lambda r: f"{r['id']} {r['status']}")
    record = s.wait(record["id"])
    show(s, record, render.job_text)
    exit_for(record)


def wait(s: Session, job_id: str, wait_timeout: float | None) -> None:
    """Block until JOB_ID is finished; print its record.  Exit 0 if it completed, 10 if not."""
    record = s.wait(job_id, wait_timeout)
    show(s, record, render.job_text)
    exit_for(record)


def result(s: Session, job_id: str, trajectory: bool) -> None:
    """Print the record and result of JOB_ID (with --trajectory: and the turns it recorded)."""
    show(s, s.conn.call("result", id=job_id, trajectory=trajectory), render.job_text)


def cancel(s: Session, job_id: str) -> None:
    """Cancel JOB_ID (a running child is interrupted and ends cancelled with its partial output)."""
    show(s, s.conn.call("cancel", id=job_id), lambda r: f"{r['id']} {r['status']} (cancel requested)")


def events(s: Session, since: int | None, follow: bool, lines: int | None, types: tuple[str, ...],
           oldest_first: bool, limit: int | None) -> None:
    """Print events from the log (each with seq, type, time, job), newest first;
    --since, -n or --oldest-first: in order.  --follow starts at the end, as
    journalctl -f does (the last 10, or -n N), and waits for a daemon that goes away
    (saying so once on stderr) from its first answer on.  Where retention removed events
    a line says so (type events.removed)."""
    def emit(event: dict[str, Any]) -> None:
        render.emit_json(event) if s.json else s.out(render.event_text(event))

    def wanted(event: dict[str, Any]) -> bool:
        return not types or event["type"] in types or event["type"] == GAP_EVENT

    def last(end: int) -> list[dict[str, Any]]:
        """The last ``-n`` events (10 by default) up to seq ``end``, oldest first."""
        found = []
        for event in s.conn.events_newest_first(list(types) or None):
            if len(found) >= (10 if lines is None else lines):
                break
            if event["seq"] <= end:
                found.append(event)
        return found[::-1]

    if not follow:
        if since is None and lines is not None:
            for event in last(s.conn.call("events_since", since=0, limit=1)["last_seq"]):
                emit(event)
            return
        stream = (s.conn.events_newest_first(list(types) or None) if since is None and not oldest_first
                  else filter(wanted, s.conn.follow(since or 0, follow=False)))
        for event in take(s, stream, limit, "events"):
            emit(event)
        return
    end = s.conn.call("events_since", since=0, limit=1)["last_seq"]  # the first answer: without a daemon, exit 3
    away = Away(lambda text: s.out(f"{s.prog}: {text}", err=True), "the events")
    if since is None:
        for event in away.retry(lambda: last(end)):  # the daemon may go between two requests
            emit(event)
        since = end
    for event in s.conn.follow(since, lost=away.lost):  # gone before it subscribes too: it waits
        if wanted(event):
            emit(event)


VERBS: dict[str, Verb] = {verb.name: verb for verb in (
    Verb("status", (), status),
    Verb("hello", (), hello),
    Verb("ps", (Opt("--all", "flag", "Every job, not only running and queued ones.", dest="show_all"),
                Opt("--kind", help="Only jobs of this kind."), oldest_first(), limit("jobs")), ps),
    Verb("delegate", (
        Arg("goal", required=False),
        Opt("--goal-file", "file", "Read the goal from this file ('-': standard input)."),
        Opt("--background", "flag", "Return at once; the result arrives as an async_delegation event."),
        Opt("--queue", "flag", "With --background: wait for a free slot instead of capacity_reached."),
        Opt("--context", help="Context for the subagent (what it needs to know)."),
        Opt("--toolsets", help="Comma-separated toolsets (default: the config's toolsets)."),
        Opt("--model", help="Model name."),
        Opt("--provider", "choice", choices="providers.PROVIDERS"),
        Opt("--role", "choice", choices="toolsets.ROLES"),
        Opt("--max-turns", "int1"),
        Opt("--cwd", "dir", "Working directory of the subagent (default: the current directory)."),
        Opt("--memory-limit", "int1", "Memory limit of the child and all it starts, in MiB (at most "
            "child_limits.memory_mb).", dest="memory_limit_mb", metavar="MIB"),
        Opt("--cpu-limit", "int1", "CPU seconds per process of the job (at most child_limits.cpu_seconds).",
            dest="cpu_limit_seconds", metavar="SECONDS"),
        Opt("--max-processes", "int1", "Processes (at most child_limits.processes)."),
        Opt("--max-open-files", "int1", "Open files per process."),
        Opt("--timeout-seconds", "float", "Wall-clock limit (default: none; a child without activity for "
            "delegation.stale_after_seconds is stopped anyway)."),
        Opt("--after", help="Start once these jobs completed (fail if one does not).", metavar="ID[,ID]"),
        Opt("--env", help="Give the subagent and its commands a variable (repeatable); NAME alone: hermesd's "
            "variable of that name, even a secret one.", multiple=True, metavar="NAME[=VALUE]"),
        Opt("--secret", help="The same, as a secret: its value is [REDACTED:NAME] wherever stored or shown "
            "(repeatable; NAME alone keeps the value off the command line).", multiple=True,
            metavar="NAME[=VALUE]"),
        Opt("--output-schema", "file", "JSON Schema the final answer must validate against ('-': standard input).",
            metavar="FILE"),
        Opt("--image", help="Run its terminal commands in a container of this image (docker or podman), the "
            "working directory mounted at /workspace."),
        Opt("--no-resume", "flag", "Do not resume it at the next start if hermesd stops or dies while it runs: it "
            "ends interrupted at a graceful stop, lost after a crash."),
        Opt("--worktree", "flag", "Run it in a new git worktree of the repository its working directory is in, on "
            "a new branch hermes/JOB_ID; kept when it holds changes, removed with the branch when not "
            "(hermesctl worktrees)."),
        Opt("--idempotency-key", help=IDEMPOTENCY_HELP, metavar="KEY"),
        Opt("--max-cost-usd", "float", "Budget of the job and all its subagents: no model call starts once this is "
            "spent.", metavar="USD"),
        Opt("--max-tokens", "int", "Budget of the job and all its subagents in tokens (input and output).",
            metavar="TOKENS")), delegate),
    Verb("wait", (JOB, Opt("--timeout", "float0", "Give up after this many seconds (exit 9).",
                           dest="wait_timeout")), wait),
    Verb("result", (JOB, Opt("--trajectory", "flag", "Include the ShareGPT trajectory the child recorded.")),
         result),
    Verb("cancel", (JOB,), cancel),
    Verb("events", (Opt("--since", "int0", "Only events with seq greater than this, oldest first."),
                    Opt("--follow", "flag", "Keep printing new events as they come (survives daemon restarts); "
                        "starts with the last 10 (-n) unless --since says where.", short="-f", slow=True),
                    Opt("--lines", "int0", "The last N events, oldest first (with --follow: then the new ones; "
                        "default 10).", short="-n", metavar="N"),
                    Opt("--type", help="Only events of this type (repeatable).", dest="types", multiple=True),
                    oldest_first(), limit("events")), events),
)}
"""Every command defined here, by name."""

COMMANDS = tuple(VERBS.values())
"""The family's commands: every verb (:mod:`client.ctl` makes each its click command)."""


def waits_for_job(verb: str, values: dict[str, Any]) -> bool:
    """True when command ``verb`` with ``values`` waits for a job to end (``wait``, a foreground
    ``delegate``)."""
    return verb == "wait" or (verb == "delegate" and not values.get("background"))
