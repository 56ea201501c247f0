"""The Kanban plugin and its ops: the board for people (``kanban.*``),
worker profiles (``profile.*``), and the child ops ``kanban.<verb>`` through which
an agent's ``kanban`` tools reach the same board.

An agent reaches the board only through its ``kanban`` toolset: a worker
(a ``kanban_worker`` job) may use ``my_task``, ``complete``, ``block``,
``comment`` and ``heartbeat`` on its own task; any other job whose toolsets
include ``kanban`` (an orchestrator, e.g. a session created with
``toolsets: [kanban]``) may use ``create``, ``link``, ``list``, ``show``,
``comment`` and ``unblock``.  Who may call what: ``hermesd.kanban.actors``; the
task rules: ``hermesd.kanban.board``.

The board and its dispatcher are made at their first use (:meth:`KanbanPlugin.board`): at the
first ``kanban.*`` op (a person's, or an agent's ``kanban_*`` tool), or at start when the state
database holds a task; an idle daemon that never had a task imports neither (bench/README.md:
its idle memory).  The profiles are read at the first op that needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from hermesd import idempotency
from hermesd.context import Context
from hermesd.contract.states import KanbanStatus
from hermesd.subagents import SubagentRules
from hermesd.kanban import actors
from hermesd.kanban.actors import PERSON, Actor
from hermesd.kanban.schema import MIGRATIONS, WORKER_KIND
from hermesd.jobs import JobKind
from hermesd.protocol import ProtocolError, arg
from hermesd.router import OpInfo, op

if TYPE_CHECKING:
    from hermesd.kanban.board import Board
    from hermesd.kanban.dispatcher import Dispatcher

STATUSES = tuple(KanbanStatus)

LIST_TEXT_CHARS = 500
"""``kanban.list`` cuts each task's ``body`` and ``result`` to this many characters (``kanban.show`` has them whole)."""


class KanbanPlugin(SubagentRules):
    """Kanban workers: the dispatcher claims ready tasks and runs a ``kanban_worker``
    child for each.  A queued worker ends ``interrupted`` at shutdown (its task
    goes back to the queue, without a failure); a worker that ends holding its
    claim gives the task back in the same transaction."""

    events = {
        "kanban.created": "A task was put on a board. `data`: `task`, `board`, `title`, `by`, `assignee`, `parents`, "
        "`priority`.",
        "kanban.status": "A task changed status. `data`: `task`, `board`, `title`, `status`, `previous`, `reason`, "
        "`assignee`, `result` (when done); `job`: the worker concerned, if any.",
        "kanban.linked": "A task now waits for another. `data`: `task`, `parent`, `child`, `by`.",
        "kanban.unlinked": "A task no longer waits for another. `data`: `task`, `parent`, `child`, `by`.",
        "kanban.commented": "A comment was added. `data`: `task`, `author`, `text`.",
        "kanban.claimed": "The dispatcher claimed a ready task for a new worker job. `data`: `task`, `worker`, "
        "`assignee`, `attempt`.",
        "kanban.reclaimed": "A worker lost its claim: it ended without completing, fell silent for "
        "`kanban.heartbeat_ttl_seconds`, or hermesd stopped. `data`: `task`, `worker`, `reason`, `failure` "
        "(counts as a failed attempt), `failures`.",
        "kanban.spawn_failed": "A worker could not be started for a task (no such profile, no working directory...). "
        "`data`: `task`, `worker`, `reason`, `failure`, `failures`.",
        "profile.created": "A worker profile was created or replaced. `data`: the profile.",
        "profile.deleted": "A worker profile was deleted. `data`: what it was.",
    }

    kinds = (JobKind(WORKER_KIND, "kbw", at_shutdown="stop", at_restart="journal"),)
    migrations = MIGRATIONS
    on_demand = ("hermesd.kanban.board", "hermesd.kanban.dispatcher")

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.dispatcher: "Dispatcher | None" = None  # made at the first need (:meth:`board`)
        self.restored = False
        ctx.provide(self)  # the ops reach the board through it

    def board(self) -> "Dispatcher":
        """The dispatcher (its board: ``.board``), made now if it was not, and dispatching once
        the daemon has restored its jobs."""
        if self.dispatcher is None:
            from hermesd.kanban.dispatcher import Dispatcher

            self.dispatcher = self.ctx.provide(Dispatcher(self.ctx))
            if self.restored:
                self.dispatcher.start()
        return self.dispatcher

    def on_terminal(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """A worker that ended holding its claim gives the task back (or blocks it); without a
        board made, no task was ever claimed."""
        return self.dispatcher.on_terminal(row) if self.dispatcher is not None else []

    def on_event(self, event: dict[str, Any]) -> None:
        """Progress and ``running`` of a worker are signs of life."""
        if self.dispatcher is not None:
            self.dispatcher.on_event(event)

    def restore(self) -> None:
        """Start dispatching (after the jobs are reconciled) when the database holds a task;
        else at the first op that uses the board."""
        self.restored = True
        if self.dispatcher is not None or self.ctx.store.db.execute("SELECT 1 FROM kanban_tasks LIMIT 1").fetchone():
            self.board().start()

    def shutdown(self) -> None:
        """Stop dispatching."""
        if self.dispatcher is not None:
            self.dispatcher.stop()


def _dispatcher(ctx: Context) -> "Dispatcher":
    return ctx.service(KanbanPlugin).board()


def _board(ctx: Context) -> "Board":
    return _dispatcher(ctx).board


def _profiles() -> Any:
    """:mod:`hermesd.kanban.profiles`, imported at its first use."""
    from hermesd.kanban import profiles

    return profiles


def _person(args: dict[str, Any]) -> Actor:
    return actors.person(arg(args, "author", str, PERSON.name))


# the verbs, shared by the client ops and the child ops -------------------------

def create(ctx: Context, actor: Actor, args: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
    """``title``, ``assignee`` (a profile), ``body``, ``parents`` (ids), ``priority``
    (higher first, default 0), ``board``, ``triage``, ``cwd`` → the task (a person's ``kanban.create``
    keeps its ``idempotency_key`` with it: :mod:`hermesd.idempotency`)."""
    return _board(ctx).create(actor, title=args.get("title"), assignee=args.get("assignee"), body=args.get("body"),
                            parents=args.get("parents"), priority=args.get("priority", 0) or 0,
                            board=args.get("board"), triage=arg(args, "triage", bool, False), cwd=args.get("cwd"),
                            idempotency_key=idempotency_key)


def link(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``parent``, ``child`` → the child task."""
    return _board(ctx).link(actor, args.get("parent"), args.get("child"))


def listing(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``board``, ``status``, ``assignee``, ``archived`` → ``{tasks, profiles, boards}``."""
    board = _board(ctx)
    from hermesd.kanban.board import board_arg

    rows = board.list(board=board_arg(args["board"]) if args.get("board") is not None else None,
                      status=arg(args, "status", str, None, choices=STATUSES),
                      assignee=arg(args, "assignee", str, None), archived=arg(args, "archived", bool, False))
    return {"tasks": [board.record(r, cut=LIST_TEXT_CHARS) for r in rows], "boards": board.boards(),
            "profiles": [{"name": p.name, "description": p.description} for p in _profiles().list_all()]}


def show(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``id`` → the task with its comments."""
    board = _board(ctx)
    return board.record(board.require(args.get("id")), full=True)


def comment(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``id``, ``text`` → the comment."""
    return _board(ctx).comment(actor, args.get("id"), args.get("text"))


def unblock(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``id``, ``note`` → the task."""
    return _board(ctx).unblock(actor, args.get("id"), args.get("note"))


def my_task(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """→ the worker's own task with comments and ``parent_results``."""
    return _board(ctx).my_task(actor)


def complete(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``result``, ``artifacts`` → the task, now done."""
    return _board(ctx).complete(actor, args.get("result"), args.get("artifacts"), args.get("id"))


def block(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``reason`` → the task, now blocked."""
    return _board(ctx).block(actor, args.get("reason"), args.get("id"))


def heartbeat(ctx: Context, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``note`` → ``{id, status, heartbeat_at}``."""
    return _board(ctx).heartbeat(actor, args.get("note"))


VERBS: dict[str, Callable[[Context, Actor, dict[str, Any]], Any]] = {
    "create": create, "link": link, "list": listing, "show": show, "comment": comment, "unblock": unblock,
    "my_task": my_task, "complete": complete, "block": block, "heartbeat": heartbeat}
"""Every verb an agent's ``kanban_<verb>`` tool may call; who may call which: :mod:`hermesd.kanban.actors`."""


def _agent(ctx: Context, job: str) -> Actor:
    """The actor child job ``job`` is (``hermesd.kanban.actors.of_job``)."""
    row = ctx.jobs.require(job)
    return actors.of_job(row, row["kind"] == WORKER_KIND, lambda task: (_board(ctx).get(task) or {}).get("assignee"))


def _child_op(verb: str) -> Callable[..., Any]:
    """The child op ``kanban.<verb>``: the calling job's actor, its sign of life, its right to ``verb``."""

    async def handler(ctx: Context, job: str, args: dict[str, Any]) -> Any:
        actor = _agent(ctx, job)
        if actor.worker:
            _board(ctx).liveness.beat(job)  # any call from a worker is a sign of life
        actor.may(verb)
        return VERBS[verb](ctx, actor, {k: v for k, v in args.items() if k not in ("job", "token")})

    handler.__name__ = handler.__qualname__ = f"child_kanban_{verb}"
    handler.__doc__ = (f"An agent's ``kanban_{verb}`` tool ({'worker' if verb in actors.WORKER_VERBS else ''}"
                       f"{' and ' if verb in actors.WORKER_VERBS and verb in actors.ORCHESTRATOR_VERBS else ''}"
                       f"{'orchestrator' if verb in actors.ORCHESTRATOR_VERBS else ''}): "
                       + (VERBS[verb].__doc__ or "") + "  Sent as the child op itself or inside ``child.call "
                       "{op, args}``.  A worker acts on its own task only (another task id is ``bad_request``; "
                       "a claim it lost is ``invalid_state``); an orchestrator needs ``kanban`` in its toolsets.")
    handler.op_info = OpInfo(f"kanban.{verb}", child=True)  # type: ignore[attr-defined]
    return handler


for _verb in VERBS:
    globals()[f"child_kanban_{_verb}"] = _child_op(_verb)


# ops for people ---------------------------------------------------------------

@op("kanban.create")
async def kanban_create(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Put a task on a board: ``title``, ``assignee`` (a profile name), optional
    ``body``, ``parents`` (task ids it waits for), ``priority`` (integer, higher runs
    first, default 0), ``board`` (default ``default``), ``triage`` (park it in
    ``triage`` until unblocked), ``cwd`` (absolute working directory of its worker;
    default ``STATE_DIR/kanban/BOARD``), ``author``.  Returns the task record:
    ``id`` (``kb_N``), ``board``, ``title``, ``body``, ``assignee``, ``priority``,
    ``status``, ``parents``, ``children``, ``result``, ``artifacts``,
    ``block_reason``, ``claimed_by``, ``claimed_at``, ``heartbeat_at``, ``worker``,
    ``attempts``, ``failures``, ``last_error``, ``created_by``, ``created_at``,
    ``updated_at``, ``completed_at``, ``cwd``.  ``not_found`` for an unknown
    profile or parent.  ``idempotency_key``: a repeat of a request with the same key
    gets the task the first one made (its record now, with ``repeat: true``) and creates
    none; the key with other arguments is ``bad_request`` naming the first task
    (:mod:`hermesd.idempotency`)."""
    key = idempotency.key_of(args, "kanban.create")
    board = _board(ctx)
    first = idempotency.earlier(ctx.store, key, "kanban_tasks", "task")
    if first is not None:
        return idempotency.repeat(board.record(first))
    return create(ctx, _person(args), args, key)


@op("kanban.link")
async def kanban_link(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Make task ``child`` wait for task ``parent`` (same board, no cycles); a ready
    child goes back to ``todo``.  Returns the child's record.  ``invalid_state`` when
    the child is already running, done or archived."""
    return link(ctx, _person(args), args)


@op("kanban.unlink")
async def kanban_unlink(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Make task ``child`` stop waiting for task ``parent``; a todo child whose other
    parents are done becomes ready.  Returns the child's record (``not_found`` when
    there is no such link)."""
    return _board(ctx).unlink(_person(args), args.get("parent"), args.get("child"))


@op("kanban.list")
async def kanban_list(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Tasks, highest priority first: optional ``board``, ``status``, ``assignee``,
    ``archived`` (include archived tasks).  Returns ``{tasks: [record…], boards:
    [name…], profiles: [{name, description}]}`` — the profiles are what an
    orchestrator routes work by.  Each record's ``body`` and ``result`` are cut at
    500 characters (``kanban.show`` has them whole)."""
    return listing(ctx, PERSON, args)


@op("kanban.show")
async def kanban_show(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Task ``id``: its record (see ``kanban.create``) plus ``comments: [{author, text, time}]``."""
    return show(ctx, PERSON, args)


@op("kanban.comment")
async def kanban_comment(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Add ``text`` to task ``id`` (``author`` optional); returns ``{task, author, text, time}``."""
    return comment(ctx, _person(args), args)


@op("kanban.unblock")
async def kanban_unblock(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Put blocked (or triage) task ``id`` back in the queue, its failure count reset;
    ``note`` becomes a comment its next worker reads.  Returns the record;
    ``invalid_state`` for a task that is not blocked."""
    return unblock(ctx, _person(args), args)


@op("kanban.archive")
async def kanban_archive(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Take task ``id`` off the board (``archived``); a worker still running it is
    stopped; tasks waiting for it unfinished become ``blocked`` (unlink them to go
    on).  Returns the record."""
    record, worker = _board(ctx).archive(_person(args), args.get("id"))
    if worker:
        try:
            ctx.runner.stop(worker, "kanban_archive")
        except ProtocolError:
            pass  # it ended meanwhile
    return record


# profiles ------------------------------------------------------------------------

@op("profile.create")
async def profile_create(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Create worker profile ``name`` (``HERMES_HOME/profiles/NAME/config.yaml``):
    ``description`` (what it is good at; orchestrators route by it), optional
    ``model``, ``provider``, ``toolsets`` (default: the config's; ``all`` never
    includes ``kanban``), ``worktree`` (its workers run in git worktrees of their own),
    ``mcp_servers`` (MCP servers of its own, only its workers get: ``hermesd.mcp.config``), ``replace`` (overwrite an existing profile).  Returns
    ``{name, description, model, provider, toolsets, worktree, path}``; ``invalid_state``
    when it exists and ``replace`` is off."""
    fields = {k: args[k] for k in ("description", "model", "provider", "toolsets", "worktree", "mcp_servers")
              if k in args}
    profile = _profiles().save(arg(args, "name", str), fields, replace=arg(args, "replace", bool, False))
    ctx.events.emit("profile.created", data=profile.to_dict())
    return profile.to_dict()


@op("profile.list")
async def profile_list(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Every profile by name: ``{profiles: [{name, description, model, provider, toolsets, path}]}``;
    a profile whose file cannot be used is ``{name, path, error}`` (the error names file and line)."""
    profiles = _profiles()
    found = [p.to_dict() for p in profiles.list_all()] + profiles.broken()
    return {"profiles": sorted(found, key=lambda p: p["name"])}


@op("profile.show")
async def profile_show(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Profile ``name`` (``not_found`` lists the profiles there are; ``invalid_config``
    names the file and key of a broken one)."""
    return _profiles().load(arg(args, "name", str)).to_dict()


@op("profile.delete")
async def profile_delete(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """Delete profile ``name`` and its directory; returns what it was.  ``invalid_state``
    while unfinished (not done or archived) tasks are assigned to it."""
    name = arg(args, "name", str)
    _board(ctx).unassigned_check(name)
    gone = _profiles().delete(name)
    ctx.events.emit("profile.deleted", data=gone)
    return gone
