"""The Kanban board: tasks, parent links, comments and claims in the state database.

Task statuses and how a task moves between them::

    triage   --unblock-->                     todo | ready
    todo     --every parent done-->           ready
    todo     --a parent archived unfinished-->  blocked   (unlinking that parent moves it on)
    ready    --claim (dispatcher)-->          running
    ready    --link to an unfinished task-->  todo
    ready    --N failed spawns-->             blocked
    running  --kanban_complete-->             done
    running  --kanban_block, worker cancelled, N failed attempts-->  blocked
    running  --claim released (worker ended, silent, hermesd stopped)-->  ready | todo
    blocked  --unblock-->                     ready | todo
    any but archived  --archive-->            archived

A task is ``ready`` when every parent is done (an archived parent counts when it
was done before).  Every status change — claims included — goes through
:meth:`Board._set`, checked against :data:`TRANSITIONS`; every status is reachable
(there is no ``review``: nothing ever moved a task there).

Which verbs an actor may call is :mod:`hermesd.kanban.actors`; what it may touch
is checked here: people and orchestrator agents create, link, list, show,
comment and unblock (people also archive); a worker (an actor with a ``task``)
reads and changes only its own task, and completes or blocks it only while its
claim is still its own.

Every change is written with its ``kanban.*`` events in one transaction and the
events are published after the commit (:meth:`Board.run`).  The ``_…``
methods, and :meth:`Board.release` given ``out``, record their events in an
``out`` list instead, so that a caller already inside a transaction (the job
table's terminal hook) publishes them itself after its own commit.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from hermesd import clock
from hermesd.contract.states import KanbanStatus  # noqa: F401  (WORKER_ROLE: re-exported)
from hermesd.contract.toolsets import WORKER_ROLE
from hermesd.events import EventLog
from hermesd.kanban import profiles
from hermesd.kanban.actors import PERSON, Actor  # noqa: F401  (PERSON: re-exported)
from hermesd.kanban.liveness import Liveness
from hermesd.kanban.schema import MIGRATIONS  # noqa: F401  (re-exported)
from hermesd.protocol import ProtocolError, in_range
from hermesd.store import Store

STATUSES = tuple(KanbanStatus)
TRANSITIONS: dict[str, frozenset[str]] = {
    "triage": frozenset({"todo", "ready", "archived"}),
    "todo": frozenset({"ready", "blocked", "archived"}),
    "ready": frozenset({"running", "todo", "blocked", "archived"}),
    "running": frozenset({"done", "blocked", "ready", "todo", "archived"}),
    "blocked": frozenset({"todo", "ready", "archived"}),
    "done": frozenset({"archived"}),
    "archived": frozenset(),
}
"""Allowed status changes; anything else is ``invalid_state``."""


DEFAULT_BOARD = "default"
BOARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A board name: letters, digits, ``_``, ``.``, ``-`` (it names the board's work directory)."""

MAX_TITLE = 500
MAX_PRIORITY = 1_000_000_000
"""Priorities lie within ±this (higher runs first)."""
MAX_TEXT = 64 * 1024
"""Longest title and longest body, comment or result, in characters."""



def text_arg(value: Any, field: str, *, limit: int = MAX_TEXT, required: bool = True) -> str:
    """``value`` as a stripped text of at most ``limit`` characters.

    Raises ``bad_request`` (``too_large``) naming ``field`` when it is not a
    string, empty while ``required``, or too long.
    """
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ProtocolError("bad_request", f"argument '{field}' must be a non-empty text", {"field": field})
    if len(value) > limit:
        raise ProtocolError("too_large", f"argument '{field}' exceeds {limit} characters", {"field": field})
    return value.strip()


def board_arg(value: Any) -> str:
    """A valid board name (``default`` for None); raises ``bad_request`` naming ``board``."""
    if value is None:
        return DEFAULT_BOARD
    if not isinstance(value, str) or not BOARD_NAME.match(value):
        raise ProtocolError("bad_request", f"board {value!r} must match {BOARD_NAME.pattern}", {"field": "board"})
    return value


class Board:
    """Every board of one state database, and the one owner of its tasks' state.
    ``kick`` is called after each change (the dispatcher looks for ready tasks);
    :attr:`liveness` records the workers' signs of life."""

    def __init__(self, store: Store, events: EventLog, kick: Callable[[], None] | None = None):
        self.store = store
        self.events = events
        self.kick = kick or (lambda: None)
        self.liveness = Liveness()

    # reading -------------------------------------------------------------

    def get(self, task_id: str) -> dict[str, Any] | None:
        """The ``kanban_tasks`` row of ``task_id`` or None."""
        return self.store.one("SELECT * FROM kanban_tasks WHERE id = ?", (task_id,))

    def require(self, task_id: Any) -> dict[str, Any]:
        """The row of ``task_id``; raises ``bad_request`` (not a text) or ``not_found``."""
        if not isinstance(task_id, str) or not task_id:
            raise ProtocolError("bad_request", "argument 'id' must be a task id such as 'kb_1'", {"field": "id"})
        row = self.get(task_id)
        if row is None:
            raise ProtocolError("not_found", f"no task {task_id!r}", {"task": task_id})
        return row

    def parents(self, task_id: str) -> list[dict[str, Any]]:
        """The rows of the tasks ``task_id`` waits for, oldest first."""
        return self.store.all("SELECT t.* FROM kanban_links l JOIN kanban_tasks t ON t.id = l.parent "
                              "WHERE l.child = ? ORDER BY t.num", (task_id,))

    def children(self, task_id: str) -> list[dict[str, Any]]:
        """The rows of the tasks waiting for ``task_id``, oldest first."""
        return self.store.all("SELECT t.* FROM kanban_links l JOIN kanban_tasks t ON t.id = l.child "
                              "WHERE l.parent = ? ORDER BY t.num", (task_id,))

    def comments(self, task_id: str) -> list[dict[str, Any]]:
        """``[{author, text, time}]`` of ``task_id`` in order."""
        return self.store.all("SELECT author, text, time FROM kanban_comments WHERE task = ? ORDER BY id",
                              (task_id,))

    def record(self, row: dict[str, Any], *, full: bool = False, cut: int | None = None) -> dict[str, Any]:
        """The public view of a task: its columns (``worker`` = the last worker job)
        plus ``parents`` and ``children`` ids; ``full`` adds ``comments``; ``cut``
        shortens ``body`` and ``result`` to that many characters (listings)."""
        rec = {k: v for k, v in row.items() if k not in ("num", "last_worker", "idempotency_key")}
        rec["worker"] = row.get("last_worker")
        rec["parents"] = [p["id"] for p in self.parents(row["id"])]
        rec["children"] = [c["id"] for c in self.children(row["id"])]
        if full:
            rec["comments"] = self.comments(row["id"])
        for key in ("body", "result") if cut else ():
            if rec[key] and len(rec[key]) > cut:
                rec[key] = rec[key][:cut] + f"… [{len(rec[key]) - cut} more characters: see kanban.show]"
        return rec

    def list(self, *, board: str | None = None, status: str | None = None, assignee: str | None = None,
             archived: bool = False) -> list[dict[str, Any]]:
        """Task rows, highest priority first then oldest; archived ones only when
        ``archived`` or asked for by ``status``."""
        sql, params = "SELECT * FROM kanban_tasks WHERE 1=1", []
        for column, value in (("board", board), ("status", status), ("assignee", assignee)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        if status is None and not archived:
            sql += " AND status != 'archived'"
        return self.store.all(sql + " ORDER BY priority DESC, num", params)

    def boards(self) -> list[str]:
        """Names of the boards that hold at least one task."""
        return [r["board"] for r in self.store.all("SELECT DISTINCT board FROM kanban_tasks ORDER BY board")]

    # status machinery ----------------------------------------------------

    @staticmethod
    def _data(row: dict[str, Any], **data: Any) -> dict[str, Any]:
        """The ``data`` of a ``kanban.*`` event about task ``row``: ``task``, ``board``, ``title`` and ``data``."""
        return {"task": row["id"], "board": row["board"], "title": row["title"], **data}

    def _set(self, out: list, row: dict[str, Any], status: str, *, job: str | None = None,
             reason: str | None = None, **fields: Any) -> dict[str, Any]:
        """Move ``row`` to ``status`` with extra column ``fields``, recording ``kanban.status``."""
        previous = row["status"]
        if status != previous and status not in TRANSITIONS[previous]:
            raise ProtocolError("invalid_state", f"task {row['id']} is {previous} and cannot become {status}",
                                {"task": row["id"], "status": previous, "requested": status})
        self.store.update("kanban_tasks", "id", row["id"], {"status": status, "updated_at": clock.now_iso(),
                                                             **fields})
        new = self.get(row["id"])
        if status != previous:
            out.append(self.events.record("kanban.status", job=job, data=self._data(
                new, status=status, previous=previous, reason=reason, assignee=new["assignee"],
                result=new["result"] if status == "done" else None)))
        return new

    def _waiting_status(self, task_id: str) -> str:
        """``ready`` when every parent is done (or archived after it was done), else ``todo``."""
        for parent in self.parents(task_id):
            if not (parent["status"] == "done" or (parent["status"] == "archived" and parent["completed_at"])):
                return "todo"
        return "ready"

    def _promote_children(self, out: list, task_id: str) -> None:
        for child in self.children(task_id):
            if child["status"] == "todo" and self._waiting_status(child["id"]) == "ready":
                self._set(out, child, "ready", reason=f"parent {task_id} is done")

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(out, *args, **kwargs)`` in one transaction, publish the events it
        recorded in ``out`` after the commit, kick the dispatcher; returns ``fn``'s value."""
        out: list[dict[str, Any]] = []
        with self.store.transaction():
            value = fn(out, *args, **kwargs)
            self.events.send_after_commit(out)
        if out:
            self.kick()
        return value

    # orchestrator and people ---------------------------------------------

    def create(self, actor: Actor, *, title: Any, assignee: Any, body: Any = None, parents: Any = None,
               priority: Any = 0, board: Any = None, triage: bool = False, cwd: Any = None,
               idempotency_key: str | None = None) -> dict[str, Any]:
        """Put a task on ``board`` for profile ``assignee``; returns its record.

        ``parents``: ids of tasks it waits for (same board).  It starts ``triage``
        (with ``triage``), else ``ready`` when every parent is done, else ``todo``.
        ``idempotency_key``: the request's in its stored form (:func:`hermesd.idempotency.key_of`),
        kept with the task.  Raises ``bad_request``/``too_large`` naming the field, ``not_found`` for an
        unknown parent or profile (the message lists the profiles).
        """
        self._not_worker(actor, "create tasks")
        title = text_arg(title, "title", limit=MAX_TITLE)
        body = text_arg(body, "body", required=False)
        board = board_arg(board)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ProtocolError("bad_request", "argument 'priority' must be an integer", {"field": "priority"})
        in_range(priority, "priority", -MAX_PRIORITY, MAX_PRIORITY)
        if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
            raise ProtocolError("bad_request", f"argument 'cwd' must be an absolute path, not {cwd!r}", {"field": "cwd"})
        profiles.load(text_arg(assignee, "assignee", limit=64))
        parent_rows = [self._linkable_parent(p, board) for p in self._id_list(parents, "parents")]
        fields = {"title": title, "body": body, "board": board, "priority": priority, "cwd": cwd,
                  "assignee": assignee.strip(), "idempotency_key": idempotency_key}
        return self.run(self._create, actor, fields, parent_rows, triage)

    def _create(self, out: list, actor: Actor, fields: dict[str, Any], parent_rows: list, triage: bool) -> dict:
        now = clock.now_iso()
        num = self.store.insert("kanban_tasks", {**fields, "status": "triage" if triage else "todo",
                                                 "created_by": actor.name, "created_at": now, "updated_at": now})
        row = self.store.one("SELECT * FROM kanban_tasks WHERE num = ?", (num,))
        for parent in parent_rows:
            self.store.insert("kanban_links", {"parent": parent["id"], "child": row["id"]})
        out.append(self.events.record("kanban.created", data=self._data(
            row, by=actor.name, assignee=row["assignee"], parents=[p["id"] for p in parent_rows],
            priority=row["priority"])))
        if not triage and self._waiting_status(row["id"]) == "ready":
            row = self._set(out, row, "ready", reason="no unfinished parents")
        return self.record(row)

    def link(self, actor: Actor, parent: Any, child: Any) -> dict[str, Any]:
        """Make task ``child`` wait for task ``parent``; returns the child's record.

        A ready child goes back to ``todo`` until the parent is done.  Raises
        ``not_found``, ``bad_request`` (a cycle, another board) or ``invalid_state``
        (the child is already running, done or archived).
        """
        self._not_worker(actor, "link tasks")
        child_row = self.require(child)
        parent_row = self._linkable_parent(parent, child_row["board"])
        if child_row["status"] in ("running", "done", "archived"):
            raise ProtocolError("invalid_state", f"task {child} is {child_row['status']}: it can no longer wait "
                                "for another task", {"task": child, "status": child_row["status"]})
        if parent_row["id"] == child_row["id"] or child_row["id"] in self._ancestors(parent_row["id"]):
            raise ProtocolError("bad_request", f"linking {parent} -> {child} would make a cycle", {"field": "parent"})
        return self.run(self._link, actor, parent_row, child_row)

    def _link(self, out: list, actor: Actor, parent: dict, child: dict) -> dict[str, Any]:
        self.store.db.execute("INSERT OR IGNORE INTO kanban_links (parent, child) VALUES (?, ?)",
                              (parent["id"], child["id"]))
        out.append(self.events.record("kanban.linked", data=self._data(child, parent=parent["id"], child=child["id"],
                                                                       by=actor.name)))
        if child["status"] == "ready" and self._waiting_status(child["id"]) == "todo":
            child = self._set(out, child, "todo", reason=f"waits for {parent['id']}")
        return self.record(child)

    def unlink(self, actor: Actor, parent: Any, child: Any) -> dict[str, Any]:
        """Make task ``child`` stop waiting for task ``parent``; returns the child's record.

        A ``todo`` child whose other parents are all done becomes ``ready``.
        Raises ``not_found`` (either task, or no such link)."""
        self._not_worker(actor, "unlink tasks")
        child_row, parent_row = self.require(child), self.require(parent)
        if parent_row["id"] not in {p["id"] for p in self.parents(child_row["id"])}:
            raise ProtocolError("not_found", f"task {child_row['id']} does not wait for {parent_row['id']}",
                                {"task": child_row["id"], "parent": parent_row["id"]})
        return self.run(self._unlink, actor, parent_row, child_row)

    def _unlink(self, out: list, actor: Actor, parent: dict, child: dict) -> dict[str, Any]:
        self.store.db.execute("DELETE FROM kanban_links WHERE parent = ? AND child = ?", (parent["id"], child["id"]))
        out.append(self.events.record("kanban.unlinked", data=self._data(child, parent=parent["id"], child=child["id"],
                                                                         by=actor.name)))
        if child["status"] == "todo" and self._waiting_status(child["id"]) == "ready":
            child = self._set(out, child, "ready", reason=f"no longer waits for {parent['id']}")
        elif (child["status"] == "blocked" and (child["block_reason"] or "").endswith(" archived unfinished")
              and not self._archived_parents(child["id"])):  # blocked only by the archived parent: goes on
            child = self._set(out, child, self._waiting_status(child["id"]),
                              reason=f"no longer waits for {parent['id']}", block_reason=None)
        return self.record(child)

    def _archived_parents(self, task_id: str) -> list[str]:
        """Parents of ``task_id`` archived before they were done: it would wait for them forever."""
        return [p["id"] for p in self.parents(task_id) if p["status"] == "archived" and not p["completed_at"]]

    def unassigned_check(self, profile: str) -> None:
        """Raise ``invalid_state`` naming the unfinished tasks assigned to ``profile`` (before it is deleted)."""
        rows = self.store.all("SELECT id FROM kanban_tasks WHERE assignee = ? AND status NOT IN ('done', 'archived') "
                              "ORDER BY num", (profile,))
        if rows:
            ids = ", ".join(r["id"] for r in rows[:10]) + (" …" if len(rows) > 10 else "")
            raise ProtocolError("invalid_state", f"profile {profile!r} has {len(rows)} unfinished task(s) ({ids}); "
                                "archive them or let them finish first", {"profile": profile,
                                                                           "tasks": [r["id"] for r in rows]})

    def comment(self, actor: Actor, task_id: Any, text: Any) -> dict[str, Any]:
        """Add ``text`` to the task's comments (a worker: only on its own task); returns the comment."""
        row = self.require(self._own(actor, task_id))
        text = text_arg(text, "text")
        return self.run(self._comment, actor, row, text)

    def _comment(self, out: list, actor: Actor, row: dict, text: str) -> dict[str, Any]:
        comment = {"task": row["id"], "author": actor.name, "text": text, "time": clock.now_iso()}
        self.store.insert("kanban_comments", comment)
        out.append(self.events.record("kanban.commented", job=actor.job,
                                      data=self._data(row, author=actor.name, text=text)))
        return comment

    def unblock(self, actor: Actor, task_id: Any, note: Any = None) -> dict[str, Any]:
        """Put a ``blocked`` (or ``triage``) task back in the queue: ``ready`` or
        ``todo`` by its parents, its failure count reset; ``note`` becomes a comment
        the next worker reads.  Raises ``invalid_state`` for any other status."""
        self._not_worker(actor, "unblock tasks")
        row = self.require(task_id)
        note = text_arg(note, "note", required=False)
        if row["status"] not in ("blocked", "triage"):
            raise ProtocolError("invalid_state", f"task {row['id']} is {row['status']}, not blocked",
                                {"task": row["id"], "status": row["status"]})
        gone = self._archived_parents(row["id"])
        if gone:
            raise ProtocolError("invalid_state", f"task {row['id']} waits for {', '.join(gone)}, archived unfinished; "
                                f"unlink it first (hermesctl kanban unlink {gone[0]} {row['id']})",
                                {"task": row["id"], "parents": gone})
        return self.run(self._unblock, actor, row, note)

    def _unblock(self, out: list, actor: Actor, row: dict, note: str) -> dict[str, Any]:
        if note:
            self._comment(out, actor, row, note)
        row = self._set(out, row, self._waiting_status(row["id"]), reason=f"unblocked by {actor.name}",
                        failures=0, block_reason=None)
        return self.record(row)

    def archive(self, actor: Actor, task_id: Any) -> tuple[dict[str, Any], str | None]:
        """Take a task off the board (``archived``); returns its record and the
        worker job that held its claim (the caller stops it), if any."""
        self._not_worker(actor, "archive tasks")
        row = self.require(task_id)
        worker = row["claimed_by"]
        row = self.run(self._archive, actor, row)
        return self.record(row), worker

    def _archive(self, out: list, actor: Actor, row: dict) -> dict[str, Any]:
        """Archive ``row``; unfinished, its waiting children are blocked (they would wait forever)."""
        row = self._set(out, row, "archived", reason=f"archived by {actor.name}", claimed_by=None)
        if not row["completed_at"]:
            for child in self.children(row["id"]):
                if child["status"] == "todo":
                    self._set(out, child, "blocked", reason=f"parent {row['id']} was archived unfinished; "
                              f"unlink it (hermesctl kanban unlink {row['id']} {child['id']}) to go on, or archive this task",
                              block_reason=f"parent {row['id']} archived unfinished")
        return row

    # workers ---------------------------------------------------------------

    def my_task(self, actor: Actor) -> dict[str, Any]:
        """A worker's own task: the full record plus ``parent_results`` (id, title, result, artifacts)."""
        if not actor.worker:
            raise ProtocolError("bad_request", "only a Kanban worker has a task of its own; use kanban.show ID",
                                {"field": "id"})
        rec = self.record(self.require(actor.task), full=True)
        rec["parent_results"] = [{k: p[k] for k in ("id", "title", "result", "artifacts")}
                                 for p in self.parents(rec["id"])]
        return rec

    def complete(self, actor: Actor, result: Any, artifacts: Any = None, task_id: Any = None) -> dict[str, Any]:
        """A worker finishes its task: ``done`` with ``result`` and ``artifacts``
        (paths or URLs); children whose parents are now all done become ready."""
        row = self._claimed(actor, task_id)
        result = text_arg(result, "result")
        artifacts = self._id_list(artifacts, "artifacts")
        return self.run(self._complete, actor, row, result, artifacts)

    def _complete(self, out: list, actor: Actor, row: dict, result: str, artifacts: list) -> dict[str, Any]:
        row = self._set(out, row, "done", job=actor.job, reason=f"completed by {actor.name}", result=result,
                        artifacts=artifacts, completed_at=clock.now_iso(), claimed_by=None, block_reason=None)
        self._promote_children(out, row["id"])
        return self.record(row)

    def block(self, actor: Actor, reason: Any, task_id: Any = None) -> dict[str, Any]:
        """A worker gives up on its task for ``reason`` (something is missing): ``blocked``
        until someone unblocks it."""
        row = self._claimed(actor, task_id)
        reason = text_arg(reason, "reason")
        row = self.run(self._set, row, "blocked", job=actor.job, reason=reason, block_reason=reason, claimed_by=None)
        return self.record(row)

    def heartbeat(self, actor: Actor, note: Any = None) -> dict[str, Any]:
        """A worker says it is alive: ``heartbeat_at`` = now; returns ``{id, status, heartbeat_at}``."""
        row = self._claimed(actor, None)
        now = self.liveness.beat(actor.job)
        self.show_heartbeat(row, now)
        return {"id": row["id"], "status": row["status"], "heartbeat_at": now}

    def show_heartbeat(self, row: dict[str, Any], when: str) -> None:
        """Write ``when`` (ISO) as the last sign of life of running task ``row``'s worker (display only)."""
        self.store.update("kanban_tasks", "id", row["id"], {"heartbeat_at": when})

    # claims (the dispatcher) -----------------------------------------------

    def claim(self, task_id: str, job: str) -> dict[str, Any] | None:
        """Atomically move ``ready`` task ``task_id`` to ``running`` for worker ``job``
        (``attempts`` + 1); returns the row, or None when it was no longer ready."""
        return self.run(self._claim, task_id, job)

    def _claim(self, out: list, task_id: str, job: str) -> dict[str, Any] | None:
        row = self.get(task_id)  # inside the write transaction: nothing changes it meanwhile
        if row is None or row["status"] != KanbanStatus.READY:
            return None
        claimed: list[dict[str, Any]] = [self.events.record("kanban.claimed", job=job, data=self._data(
            row, worker=job, assignee=row["assignee"], attempt=row["attempts"] + 1))]
        row = self._set(claimed, row, KanbanStatus.RUNNING, job=job, reason=f"claimed by {job}",
                        claimed_by=job, claimed_at=clock.now_iso(), heartbeat_at=None, last_worker=job,
                        attempts=row["attempts"] + 1)
        out += claimed
        return row

    def claimed_by(self, job: str) -> dict[str, Any] | None:
        """The running task whose claim ``job`` holds, or None."""
        return self.store.one("SELECT * FROM kanban_tasks WHERE claimed_by = ? AND status = 'running'", (job,))

    def release(self, row: dict[str, Any], *, job: str | None, reason: str, failure: bool, max_failures: int,
                spawn_failed: bool = False, block: bool = False, out: list | None = None) -> dict[str, Any]:
        """End the claim of ``row`` (or count a spawn that failed before any claim).

        The task goes back to ``ready``/``todo``, or to ``blocked`` with the
        reason when ``block`` or when ``failure`` makes ``failures`` reach
        ``max_failures``.  Records ``kanban.reclaimed`` (``kanban.spawn_failed``
        with ``spawn_failed``).  With ``out`` the events are recorded there
        (the caller is inside a transaction and publishes them); otherwise it
        runs in its own transaction.  Returns the new row.
        """
        if out is None:
            return self.run(lambda o: self.release(row, job=job, reason=reason, failure=failure, out=o, block=block,
                                                   max_failures=max_failures, spawn_failed=spawn_failed))
        failures = row["failures"] + (1 if failure else 0)
        fields = {"claimed_by": None, "failures": failures, "last_error": reason if failure else row["last_error"]}
        data = self._data(row, worker=job, reason=reason, failure=failure, failures=failures)
        if spawn_failed:
            out.append(self.events.record("kanban.spawn_failed", job=job, data=data))
        else:
            out.append(self.events.record("kanban.reclaimed", job=job, data=data))
        if failure and failures >= max_failures:
            block = True
            reason = f"blocked after {failures} failed attempt(s) (kanban.max_spawn_failures={max_failures}): {reason}"
        if block:
            return self._set(out, row, "blocked", job=job, reason=reason, block_reason=reason, **fields)
        return self._set(out, row, self._waiting_status(row["id"]), job=job, reason=reason, **fields)

    # checks ----------------------------------------------------------------

    @staticmethod
    def _not_worker(actor: Actor, what: str) -> None:
        if actor.worker:
            raise ProtocolError("bad_request", f"a Kanban worker cannot {what}; it works on its own task "
                                f"{actor.task} only", {"task": actor.task})

    @staticmethod
    def _own(actor: Actor, task_id: Any) -> Any:
        """The task ``actor`` may touch: any for a non-worker, only its own for a worker."""
        if not actor.worker:
            return task_id
        if task_id not in (None, actor.task):
            raise ProtocolError("bad_request", f"task {task_id} is not yours: a Kanban worker may only read and "
                                f"change its own task {actor.task}", {"field": "id", "task": actor.task})
        return actor.task

    def _claimed(self, actor: Actor, task_id: Any) -> dict[str, Any]:
        """A worker's own task, while its claim is still this worker's."""
        if not actor.worker:
            raise ProtocolError("bad_request", "only the Kanban worker running a task can complete, block or "
                                "heartbeat it", {"field": "id"})
        row = self.require(self._own(actor, task_id))
        if row["status"] != "running" or row["claimed_by"] != actor.job:
            raise ProtocolError("invalid_state", f"task {row['id']} is {row['status']} and no longer claimed by "
                                f"{actor.job}: stop working on it", {"task": row["id"], "status": row["status"]})
        return row

    def _linkable_parent(self, task_id: Any, board: str) -> dict[str, Any]:
        row = self.require(task_id)
        if row["board"] != board:
            raise ProtocolError("bad_request", f"task {row['id']} is on board {row['board']!r}, not {board!r}",
                                {"field": "parent"})
        if row["status"] == "archived" and not row["completed_at"]:
            raise ProtocolError("invalid_state", f"task {row['id']} is archived unfinished: nothing can wait for it",
                                {"task": row["id"], "status": "archived"})
        return row

    def _ancestors(self, task_id: str) -> set[str]:
        seen, todo = set(), [task_id]
        while todo:
            for parent in self.parents(todo.pop()):
                if parent["id"] not in seen:
                    seen.add(parent["id"])
                    todo.append(parent["id"])
        return seen

    @staticmethod
    def _id_list(value: Any, field: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ProtocolError("bad_request", f"argument '{field}' must be a list of non-empty texts",
                                {"field": field})
        return list(dict.fromkeys(value))
