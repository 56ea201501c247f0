"""Session ops: session.send (with slash commands), session.list, session.history, session.get,
session.configure, session.reset, session.delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermesd import idempotency, jobs as jobs_mod
from hermesd.context import Context
from hermesd.contract.states import TERMINAL, JobStatus
from hermesd.contract.wire import JobSpec
from hermesd.subagents import SubagentRules
from hermesd.delegation.service import child_toolsets
from hermesd.jobs import JobKind
from hermesd.router import op
from hermesd.protocol import ProtocolError, arg, expand_toolsets
from hermesd.sessions.schema import COMPACT_KIND, MIGRATIONS
from hermesd.sessions.spec import TurnSpec

if TYPE_CHECKING:
    from hermesd.sessions.service import Sessions

MAX_TEXT_BYTES = 256 * 1024
SLASH_COMMANDS = {"/background": "/background PROMPT — run PROMPT as a fresh background agent; its result "
                                 "comes back to this session as a new turn",
                  "/stop": "/stop — interrupt this session's current turn and its children",
                  "/tasks": "/tasks — list this session's running children",
                  "/compact": "/compact — summarise the older part of this session's history now (what a turn "
                              "is sent; every message stays in the history)",
                  "/help": "/help — this list"}


class SessionsPlugin(SubagentRules):
    """Persistent sessions: each message runs as a ``session_turn`` child (one at a
    time per session) that gets the history and stores its new messages when it
    ends; completions of the session's background jobs are delivered as new turns.
    A queued turn runs after a restart."""

    events = {
        "session.created": "A session was created. `data.session`: its id.",
        "session.compacted": "A compaction stored its summary: the turns after it are sent the summary and the messages "
        "after `upto`. `data`: `session`, `upto` (the last message id it covers), `tokens_before`, `tokens_after` "
        "(the estimated tokens of history a turn is sent).",
        "session.compaction_failed": "A compaction ended without a summary; the session is as it was. `data`: "
        "`session`, `status`, `error`.",
        "session.reset": "A session's messages were forgotten. `data`: `session`, `messages_removed`.",
        "session.deleted": "A session and its messages were deleted. `data`: `session`, `messages_removed`.",
        "session.turn": "A session turn ended and its messages were stored. `data`: `status`, `reply`, "
        "`notification` (the delivered job id, for a delivery turn).",
    }

    kinds = (JobKind("session_turn", "turn", at_restart="journal", entry="child.agent:run_turn", spec=TurnSpec), JobKind(COMPACT_KIND, "cmp"))
    migrations = MIGRATIONS
    on_demand = ("hermesd.sessions.service", "hermesd.sessions.compaction")

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self._sessions: "Sessions | None" = None  # made at the first need (:attr:`sessions`)
        ctx.provide(self)  # the ops reach the service through it

    @property
    def sessions(self) -> "Sessions":
        """The sessions service (:mod:`hermesd.sessions.service`), made at its first use: the first
        ``session.*`` op, a turn's or a compaction's hook, a completion for a session, or at start
        when the database holds a session; an idle daemon that never had one imports none of it."""
        if self._sessions is None:
            from hermesd.sessions.service import Sessions

            self._sessions = self.ctx.provide(Sessions(self.ctx))
        return self._sessions

    def configure(self, config: Any) -> None:
        """The pool of a session's turns: ``session:<id>``, one at a time."""
        self.ctx.scheduler.prefix_limits["session:"] = 1

    def spec(self, row: dict[str, Any], spec: JobSpec) -> None:
        """The turn's child gets the session's history; a compaction's the transcript to summarise."""
        if row["kind"] == COMPACT_KIND:
            self.sessions.compactor.spec_hook(row, spec)
        else:
            self.sessions.spec_hook(row, spec)

    def on_terminal(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The turn's messages are stored with its end; a compaction's summary with its own."""
        if row["kind"] == COMPACT_KIND:
            return self.sessions.compactor.on_terminal(row, self.ctx.runner.results.get(row["id"]))
        return self.sessions.on_turn_terminal(row)

    def on_event(self, event: dict[str, Any]) -> None:
        """Completions reach idle sessions (only a session's job has a ``session``)."""
        if event.get("session"):
            self.sessions.on_event(event)

    def restore(self) -> None:
        """Deliveries interrupted by a stop are delivered again (none without a session)."""
        if self._sessions is not None or self.ctx.store.db.execute("SELECT 1 FROM sessions LIMIT 1").fetchone():
            self.sessions.restore()


def _service(ctx: Context) -> "Sessions":
    return ctx.service(SessionsPlugin).sessions


def _dispatched(ctx: Context, job: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``/background`` that started (or, repeated, had started) ``job``."""
    answer = {"command": "background", "status": "dispatched", "delegation_id": job["id"]}
    return {**answer, "queue_paused": True} if ctx.runner.pause.paused else answer


def _slash(ctx: Context, service: "Sessions", session: str, text: str, key: str | None = None) -> dict[str, Any]:
    command, _, rest = text.strip().partition(" ")
    row = service.require(session)
    if command == "/background":
        if not rest.strip():
            raise ProtocolError("bad_request", "usage: /background PROMPT", {"field": "text"})
        deleg = ctx.config.delegation
        toolsets = child_toolsets(row["spec"].get("toolsets") or [], row["spec"].get("toolsets") or [], "leaf",
                                  1, deleg.max_spawn_depth)
        job = ctx.runner.submit("background", background=True, queue=True, session=session, goal=rest.strip(),
                                toolsets=toolsets, depth=1, cwd=row["spec"].get("cwd"), idempotency_key=key)
        return _dispatched(ctx, job)
    if command == "/stop":
        stopped = []
        turn = service.busy_turn(session)
        for job in ([turn] if turn else []) + service.children(session):
            try:
                ctx.runner.stop(job["id"], "session_stop")
                stopped.append(job["id"])
            except ProtocolError:
                pass  # finished meanwhile
        return {"command": "stop", "stopped": stopped}
    if command == "/tasks":
        return {"command": "tasks", "tasks": [jobs_mod.record(j) for j in service.children(session)]}
    if command == "/compact":
        return {"command": "compact", "compaction": jobs_mod.record(service.compactor.submit(session, "requested"))}
    if command == "/help":
        return {"command": "help", "commands": list(SLASH_COMMANDS.values())}
    raise ProtocolError("bad_request", f"unknown command {command!r}; commands: {', '.join(SLASH_COMMANDS)}",
                        {"field": "text"})


@op("session.send", work=True)
async def session_send(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Send ``text`` to ``session`` (created when missing unless ``create=false``; ``cwd`` sets
    a new session's working directory, ``toolsets`` its toolsets: default the config's,
    ``kanban`` only by its literal name, which makes the session a Kanban orchestrator).
    ``toolsets`` for a session that exists already is refused (``invalid_state``: it would be
    ignored; ``session.configure`` changes them).
    A message starts a turn, which runs when the session is idle; returns ``{session, turn: job record}``.  Slash commands
    (``/background PROMPT``, ``/stop``, ``/tasks``, ``/help``) return
    ``{session, command, …}`` instead.  A new message never stops running children.
    ``resume=false``: a restart ends the turn ``lost`` instead of resuming it.
    ``idempotency_key``: a repeat of a message sent with the same key gets the turn the
    first one started (of a ``/background``, the errand it dispatched), with ``repeat: true``;
    the key with other arguments is ``bad_request`` (:mod:`hermesd.idempotency`)."""
    key = idempotency.key_of(args, "session.send")
    first = idempotency.earlier(ctx.store, key)
    if first is not None:
        if first["kind"] == "background":  # a /background sent again
            return idempotency.repeat({"session": first["session"], **_dispatched(ctx, first)})
        return idempotency.repeat({"session": first["session"], "turn": jobs_mod.record(first)})
    session = arg(args, "session", str)
    text = arg(args, "text", str)
    if not text.strip():
        raise ProtocolError("bad_request", "argument 'text' must not be empty", {"field": "text"})
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise ProtocolError("too_large", f"text exceeds {MAX_TEXT_BYTES} bytes", {"field": "text"})
    service = _service(ctx)
    toolsets = arg(args, "toolsets", list, None)
    if toolsets is not None:
        toolsets = expand_toolsets(toolsets)
        existing = service.get(session)
        if existing is not None and existing["spec"].get("toolsets") != service.toolsets_of(toolsets):
            raise ProtocolError("invalid_state", f"session {session!r} exists with toolsets "
                                f"{', '.join(existing['spec'].get('toolsets') or [])}; toolsets are set when a session "
                                f"is created (change them with `hermesctl sessions toolsets {session} LIST`)",
                                {"session": session, "field": "toolsets"})
    if arg(args, "create", bool, True):
        service.ensure(session, cwd=arg(args, "cwd", str, None), origin=arg(args, "origin", str, None),
                       toolsets=toolsets)
    if text.startswith("/"):
        return {"session": session, **_slash(ctx, service, session, text, key)}
    turn = service.start_turn(session, text, resume=arg(args, "resume", bool, True), idempotency_key=key)
    return {"session": session, "turn": jobs_mod.record(turn)}


@op("session.list")
async def session_list(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Every session: ``{sessions: [{id, created_at, updated_at, messages, busy,
    toolsets, pending_notifications, running_children}]}``."""
    service = _service(ctx)
    rows = ctx.store.all("SELECT * FROM sessions ORDER BY created_at")
    return {"sessions": [service.summary(r) for r in rows]}


@op("session.get")
async def session_get(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """One session's summary (``not_found`` if none)."""
    service = _service(ctx)
    return service.summary(service.require(arg(args, "session", str)))


@op("session.history")
async def session_history(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The messages of ``session`` in order: ``{messages: [{id, role, content (text), blocks,
    time, job, notification}], compactions: [{upto, time, job, tokens_before, tokens_after}],
    unfinished: [{job, status, error}]}``; a delivered completion has ``notification: <job id>``;
    each compaction summarised the messages up to ``upto`` (a message ``id``) for the turns after
    it; ``unfinished``: the turns of these messages that ended other than ``completed`` (a budget,
    an error, a cancel), with why, oldest first."""
    from hermesd.sessions.service import display_text

    service = _service(ctx)
    session = arg(args, "session", str)
    service.require(session)
    messages = service.history(session, arg(args, "limit", int, 10000, lo=1))
    jobs = {m["job"] for m in messages}
    ended = tuple(sorted(TERMINAL - {JobStatus.COMPLETED}))
    unfinished = [{"job": row["id"], "status": row["status"], "error": row.get("error") or row.get("exit_reason")}
                  for row in ctx.jobs.list(statuses=ended, session=session, kinds=("session_turn",), limit=10000)
                  if row["id"] in jobs]
    return {"messages": [{"id": m["id"], "role": m["role"], "content": display_text(m["content"]),
                          "blocks": m["content"], "time": m["time"], "job": m["job"], "notification": m["notification"]}
                         for m in messages],
            "compactions": service.compactor.history_marks(session), "unfinished": unfinished}


@op("session.compact")
async def session_compact(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Compact ``session`` now: queue a ``session_compact`` job (in the session's pool: after a
    running turn, before the next) that summarises the older part of what a turn is sent, the
    most recent turns kept verbatim; every message stays in the history.  Returns ``{session,
    compaction: job record}`` (the pending one when one is queued already; ``not_found``).  Its
    end is a ``session.compacted`` event (``upto``: the last message it covers, ``tokens_before``,
    ``tokens_after``: the estimated tokens a turn is sent) or ``session.compaction_failed`` (``error``;
    the session unchanged)."""
    service = _service(ctx)
    session = arg(args, "session", str)
    return {"session": session, "compaction": jobs_mod.record(service.compactor.submit(session, "requested"))}


@op("session.configure")
async def session_configure(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Change ``session``'s ``toolsets`` (a list of toolset names; ``delegation`` is
    always added) for its next turns; returns its summary (``not_found``;
    ``bad_request`` naming unknown toolsets)."""
    service = _service(ctx)
    toolsets = expand_toolsets(arg(args, "toolsets", list))
    return service.summary(service.set_toolsets(arg(args, "session", str), toolsets))


@op("session.reset")
async def session_reset(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Forget ``session``'s messages (its next turn starts a new conversation); returns
    ``{session, messages_removed}``.  ``invalid_state`` while a turn of it is queued or running."""
    service = _service(ctx)
    session = arg(args, "session", str)
    removed = service.reset(session)
    ctx.events.emit("session.reset", session=session, data={"session": session, "messages_removed": removed})
    return {"session": session, "messages_removed": removed}


@op("session.delete")
async def session_delete(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Delete ``session`` and its messages; returns ``{session, messages_removed}``.
    ``invalid_state`` while a turn or a child of it runs or a completion waits to be delivered to it."""
    service = _service(ctx)
    session = arg(args, "session", str)
    removed = service.delete(session)
    ctx.events.emit("session.deleted", session=session, data={"session": session, "messages_removed": removed})
    return {"session": session, "messages_removed": removed}
