"""Kanban and profile ops (SPEC §7): the board for people (``kanban.*``), worker
profiles (``profile.*``), and ``child.call``, through which an agent's ``kanban``
tools reach the same board.

An agent reaches the board only through its ``kanban`` toolset: a worker
(a ``kanban_worker`` job) may use ``my_task``, ``complete``, ``block``,
``comment`` and ``heartbeat`` on its own task; any other job whose toolsets
include ``kanban`` (an orchestrator, e.g. a session created with
``toolsets: [kanban]``) may use ``create``, ``link``, ``list``, ``show``,
``comment`` and ``unblock``.  The rules themselves live in ``hermesd.kanban``.
"""

from __future__ import annotations

from typing import Any, Callable

from hermesd import profiles
from hermesd.handlers import op, restore_hooks, setup_hooks, shutdown_hooks
from hermesd.kanban import PERSON, STATUSES, Actor, Board, board_arg
from hermesd.kanban_dispatch import Dispatcher
from hermesd.protocol import ProtocolError, arg


LIST_TEXT_CHARS = 500
"""``kanban.list`` cuts each task's ``body`` and ``result`` to this many characters (``kanban.show`` has them whole)."""


def _dispatcher(d) -> Dispatcher:
    return d.services["kanban"]


def _board(d) -> Board:
    return _dispatcher(d).board


def _setup(d) -> None:
    dispatcher = Dispatcher(d)
    d.services["kanban"] = dispatcher
    d.jobs.terminal_hooks.append(dispatcher.on_terminal)
    d.events.listeners.append(dispatcher.on_event)


setup_hooks.append(_setup)
restore_hooks.append(lambda d: _dispatcher(d).start())
shutdown_hooks.append(lambda d: _dispatcher(d).stop())


def _person(args: dict[str, Any]) -> Actor:
    return Actor(arg(args, "author", str, PERSON.name))


# the verbs, shared by the client ops and child.call ---------------------------

def create(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``title``, ``assignee`` (a profile), ``body``, ``parents`` (ids), ``priority``
    (higher first, default 0), ``board``, ``triage``, ``cwd`` → the task."""
    return _board(d).create(actor, title=args.get("title"), assignee=args.get("assignee"), body=args.get("body"),
                            parents=args.get("parents"), priority=args.get("priority", 0) or 0,
                            board=args.get("board"), triage=arg(args, "triage", bool, False), cwd=args.get("cwd"))


def link(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``parent``, ``child`` → the child task."""
    return _board(d).link(actor, args.get("parent"), args.get("child"))


def listing(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``board``, ``status``, ``assignee``, ``archived`` → ``{tasks, profiles, boards}``."""
    board = _board(d)
    rows = board.list(board=board_arg(args["board"]) if args.get("board") is not None else None,
                      status=arg(args, "status", str, None, choices=STATUSES),
                      assignee=arg(args, "assignee", str, None), archived=arg(args, "archived", bool, False))
    return {"tasks": [board.record(r, cut=LIST_TEXT_CHARS) for r in rows], "boards": board.boards(),
            "profiles": [{"name": p.name, "description": p.description} for p in profiles.list_all()]}


def show(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``id`` → the task with its comments."""
    board = _board(d)
    return board.record(board.require(args.get("id")), full=True)


def comment(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``id``, ``text`` → the comment."""
    return _board(d).comment(actor, args.get("id"), args.get("text"))


def unblock(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``id``, ``note`` → the task."""
    return _board(d).unblock(actor, args.get("id"), args.get("note"))


def my_task(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """→ the worker's own task with comments and ``parent_results``."""
    return _board(d).my_task(actor)


def complete(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``result``, ``artifacts`` → the task, now done."""
    return _board(d).complete(actor, args.get("result"), args.get("artifacts"), args.get("id"))


def block(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``reason`` → the task, now blocked."""
    return _board(d).block(actor, args.get("reason"), args.get("id"))


def heartbeat(d, actor: Actor, args: dict[str, Any]) -> dict[str, Any]:
    """``note`` → ``{id, status, heartbeat_at}``."""
    answer = _board(d).heartbeat(actor, args.get("note"))
    _dispatcher(d).beat(actor.job, answer["heartbeat_at"])
    return answer


Verb = Callable[[Any, Actor, dict[str, Any]], Any]
ORCHESTRATOR_VERBS: dict[str, Verb] = {"create": create, "link": link, "list": listing, "show": show,
                                       "comment": comment, "unblock": unblock}
WORKER_VERBS: dict[str, Verb] = {"my_task": my_task, "complete": complete, "block": block, "comment": comment,
                                 "heartbeat": heartbeat}


def _agent(d, job: str) -> tuple[Actor, dict[str, Verb]]:
    """The actor a child job is, and the verbs it may use."""
    row = d.jobs.require(job)
    if row["kind"] == "kanban_worker":
        task = _board(d).get(row["parent"] or "")
        who = f"{task['assignee'] if task else 'worker'} ({job})"
        return Actor(who, job=job, task=row["parent"]), WORKER_VERBS
    if "kanban" not in (row.get("toolsets") or []):
        raise ProtocolError("bad_request", f"job {job} does not have the kanban toolset (it is enabled only by its "
                            "literal name 'kanban')", {"field": "op"})
    who = f"session {row['session']}" if row.get("session") else f"job {job}"
    return Actor(who, job=job), ORCHESTRATOR_VERBS


@op("child.call", child=True)
async def child_call(d, job: str, args: dict[str, Any]) -> Any:
    """A ``kanban_*`` tool of the child's agent: ``op`` is ``kanban.<verb>``, ``args`` the tool's arguments.

    A worker (``kanban_worker`` job) may call ``my_task``, ``complete {result,
    artifacts}``, ``block {reason}``, ``comment {id, text}`` and ``heartbeat
    {note}``, on its own task only (another task id is ``bad_request``; a claim
    it lost is ``invalid_state``).  Another job needs ``kanban`` in its toolsets
    and may call ``create``, ``link``, ``list``, ``show``, ``comment`` and
    ``unblock`` (arguments as the ``kanban.*`` ops).  Any call from a worker
    counts as a sign of life for its claim.
    """
    name = arg(args, "op", str)
    call_args = arg(args, "args", dict, {})
    if not name.startswith("kanban."):
        raise ProtocolError("unknown_op", f"child.call: unknown op {name!r} (only kanban.* ops)", {"op": name})
    actor, verbs = _agent(d, job)
    if actor.worker:
        _dispatcher(d).beat(job)
    verb = verbs.get(name.removeprefix("kanban."))
    if verb is None:
        who = "a Kanban worker" if actor.worker else "an orchestrator"
        raise ProtocolError("bad_request", f"{name} is not available to {who}; it may call: "
                            f"{', '.join('kanban.' + v for v in verbs)}", {"field": "op"})
    return verb(d, actor, call_args)


# ops for people ---------------------------------------------------------------

@op("kanban.create")
async def kanban_create(d, args: dict[str, Any]) -> dict[str, Any]:
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
    profile or parent."""
    return create(d, _person(args), args)


@op("kanban.link")
async def kanban_link(d, args: dict[str, Any]) -> dict[str, Any]:
    """Make task ``child`` wait for task ``parent`` (same board, no cycles); a ready
    child goes back to ``todo``.  Returns the child's record.  ``invalid_state`` when
    the child is already running, done or archived."""
    return link(d, _person(args), args)


@op("kanban.unlink")
async def kanban_unlink(d, args: dict[str, Any]) -> dict[str, Any]:
    """Make task ``child`` stop waiting for task ``parent``; a todo child whose other
    parents are done becomes ready.  Returns the child's record (``not_found`` when
    there is no such link)."""
    return _board(d).unlink(_person(args), args.get("parent"), args.get("child"))


@op("kanban.list")
async def kanban_list(d, args: dict[str, Any]) -> dict[str, Any]:
    """Tasks, highest priority first: optional ``board``, ``status``, ``assignee``,
    ``archived`` (include archived tasks).  Returns ``{tasks: [record…], boards:
    [name…], profiles: [{name, description}]}`` — the profiles are what an
    orchestrator routes work by.  Each record's ``body`` and ``result`` are cut at
    500 characters (``kanban.show`` has them whole)."""
    return listing(d, PERSON, args)


@op("kanban.show")
async def kanban_show(d, args: dict[str, Any]) -> dict[str, Any]:
    """Task ``id``: its record (see ``kanban.create``) plus ``comments: [{author, text, time}]``."""
    return show(d, PERSON, args)


@op("kanban.comment")
async def kanban_comment(d, args: dict[str, Any]) -> dict[str, Any]:
    """Add ``text`` to task ``id`` (``author`` optional); returns ``{task, author, text, time}``."""
    return comment(d, _person(args), args)


@op("kanban.unblock")
async def kanban_unblock(d, args: dict[str, Any]) -> dict[str, Any]:
    """Put blocked (or triage) task ``id`` back in the queue, its failure count reset;
    ``note`` becomes a comment its next worker reads.  Returns the record;
    ``invalid_state`` for a task that is not blocked."""
    return unblock(d, _person(args), args)


@op("kanban.archive")
async def kanban_archive(d, args: dict[str, Any]) -> dict[str, Any]:
    """Take task ``id`` off the board (``archived``); a worker still running it is
    stopped; tasks waiting for it unfinished become ``blocked`` (unlink them to go
    on).  Returns the record."""
    record, worker = _board(d).archive(_person(args), args.get("id"))
    if worker:
        try:
            d.runner.stop(worker, "kanban_archive")
        except ProtocolError:
            pass  # it ended meanwhile
    return record


# profiles ------------------------------------------------------------------------

@op("profile.create")
async def profile_create(d, args: dict[str, Any]) -> dict[str, Any]:
    """Create worker profile ``name`` (``HERMES_HOME/profiles/NAME/config.yaml``):
    ``description`` (what it is good at; orchestrators route by it), optional
    ``model``, ``provider``, ``toolsets`` (default: the config's; ``all`` never
    includes ``kanban``), ``replace`` (overwrite an existing profile).  Returns
    ``{name, description, model, provider, toolsets, path}``; ``invalid_state``
    when it exists and ``replace`` is off."""
    fields = {k: args[k] for k in ("description", "model", "provider", "toolsets") if k in args}
    profile = profiles.save(arg(args, "name", str), fields, replace=arg(args, "replace", bool, False))
    d.events.emit("profile.created", data=profile.to_dict())
    return profile.to_dict()


@op("profile.list")
async def profile_list(d, args: dict[str, Any]) -> dict[str, Any]:
    """Every profile by name: ``{profiles: [{name, description, model, provider, toolsets, path}]}``;
    a profile whose file cannot be used is ``{name, path, error}`` (the error names file and line)."""
    found = [p.to_dict() for p in profiles.list_all()] + profiles.broken()
    return {"profiles": sorted(found, key=lambda p: p["name"])}


@op("profile.show")
async def profile_show(d, args: dict[str, Any]) -> dict[str, Any]:
    """Profile ``name`` (``not_found`` lists the profiles there are; ``invalid_config``
    names the file and key of a broken one)."""
    return profiles.load(arg(args, "name", str)).to_dict()


@op("profile.delete")
async def profile_delete(d, args: dict[str, Any]) -> dict[str, Any]:
    """Delete profile ``name`` and its directory; returns what it was.  ``invalid_state``
    while unfinished (not done or archived) tasks are assigned to it."""
    name = arg(args, "name", str)
    _board(d).unassigned_check(name)
    gone = profiles.delete(name)
    d.events.emit("profile.deleted", data=gone)
    return gone
