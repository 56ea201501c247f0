"""Persistent sessions of the main agent, their turns, and delivery into them.

A session is a conversation stored in ``messages``.  Each turn is a
``session_turn`` job: a child that receives the history, runs the agent loop
and hands back its new messages, which are stored *in the transaction of the
turn's terminal state*.

One turn at a time per session: every turn holds the ``session:<id>`` pool
(limit 1), so a message sent while a turn runs waits for it, and so does the
delivery of a background completion — a completion always enters as a new turn
when the session is idle, never inside a running turn.

Exactly-once delivery: a pending notification of the session gets one delivery
turn (``state='queued'``, ``turn`` = its job).  When that turn ends — however it
ends, even ``lost`` after a crash — the block is in the history with
``notification=<job id>`` and the notification is ``delivered``, all in one
transaction.  At start-up, notifications still ``pending`` (the daemon died
between the completion and the delivery turn) get their turn.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from hermesd import clock
from hermesd.contract.states import ACTIVE, LIVE, TERMINAL
from hermesd.contract.wire import JobSpec
from hermesd.delegation.delivery import Delivery
from hermesd.protocol import ProtocolError
from hermesd.sessions.compaction import Compactor
from hermesd.sessions.spec import TurnSpec

if TYPE_CHECKING:
    from hermesd.context import Context

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAIN_TOOLSETS_EXTRA = ("delegation",)
MAIN_SYSTEM_PROMPT = (
    "You are the persistent agent of this session, run by hermesd. Each message you receive is a new turn "
    "of one long conversation. You can hand work to subagents with delegate_task (or spawn_agent / "
    "spawn_parallel): in the foreground you wait for their results; with background=true you get a "
    "delegation id at once and the result arrives later as a new turn that starts with "
    "'[Async delegation'. Answer the user directly and concisely."
)


def text_of(content: list[dict[str, Any]] | str) -> str:
    """The visible text of a message's content blocks (text blocks joined)."""
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text").strip()


def display_text(content: list[dict[str, Any]] | str, width: int = 300) -> str:
    """A readable one-string view of content blocks: text as is, tool calls as
    ``→ name {input}``, tool results as ``← result`` (cut at ``width``), thinking left out."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(block.get("text", ""))
        elif kind == "tool_use":
            parts.append(f"→ {block.get('name')} {json.dumps(block.get('input'), ensure_ascii=False)[:width]}")
        elif kind == "tool_result":
            body = block.get("content")
            body = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
            parts.append(f"← {'error: ' if block.get('is_error') else ''}{body[:width]}")
    return "\n".join(p for p in parts if p).strip()


def merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive messages of the same role so roles alternate (Messages API rule)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if out and out[-1]["role"] == msg["role"]:
            out[-1] = {"role": msg["role"], "content": list(out[-1]["content"]) + list(msg["content"])}
        else:
            out.append({"role": msg["role"], "content": list(msg["content"])})
    return out


class Sessions:
    """The sessions service of one daemon (``ctx.service(Sessions)``)."""

    def __init__(self, d: Context):
        self.d = d
        self.notes = d.service(Delivery).notifications  # the delegation plugin's (it comes first)
        self.compactor = Compactor(d, self)

    # sessions and messages -------------------------------------------------

    def get(self, session: str) -> dict[str, Any] | None:
        """The ``sessions`` row or None."""
        return self.d.store.one("SELECT * FROM sessions WHERE id = ?", (session,))

    def require(self, session: str) -> dict[str, Any]:
        """The ``sessions`` row; raises ``not_found``."""
        row = self.get(session)
        if row is None:
            raise ProtocolError("not_found", f"no session {session!r}", {"session": session})
        return row

    def ensure(self, session: str, *, cwd: str | None = None, toolsets: list[str] | None = None,
               origin: str | None = None) -> dict[str, Any]:
        """Return the session, creating it first if needed.

        Raises ``bad_request`` for an id outside ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``.
        """
        if not SESSION_ID.match(session):
            raise ProtocolError("bad_request", f"session id {session!r} must match {SESSION_ID.pattern}",
                                {"field": "session"})
        row = self.get(session)
        if row is not None:
            return row
        spec = {"toolsets": self.toolsets_of(toolsets), "cwd": cwd}
        now = clock.now_iso()
        self.d.store.insert("sessions", {"id": session, "title": None, "origin": origin, "spec": spec,
                                         "created_at": now, "updated_at": now})
        self.d.events.emit("session.created", session=session, data={"session": session})
        return self.require(session)

    def workdir(self, row: dict[str, Any]) -> str:
        """The working directory of ``row``'s turns: the session's ``cwd``, else its own
        ``HERMES_HOME/sessions/ID/work/`` (made private on first use): the same directory every
        turn, so the system prompt that names it stays the same and the prompt cache holds."""
        if row["spec"].get("cwd"):
            return row["spec"]["cwd"]
        path = self.d.config.state_dir() / "sessions" / row["id"] / "work"
        for part in (path.parent.parent, path.parent, path):
            part.mkdir(mode=0o700, exist_ok=True)
        return str(path)

    def toolsets_of(self, toolsets: list[str] | None) -> list[str]:
        """A session's stored toolsets: ``toolsets`` (default the config's) plus :data:`MAIN_TOOLSETS_EXTRA`."""
        base = list(toolsets if toolsets is not None else self.d.config.toolsets)
        return base + [t for t in MAIN_TOOLSETS_EXTRA if t not in base]

    def set_toolsets(self, session: str, toolsets: list[str]) -> dict[str, Any]:
        """Change the toolsets of ``session`` for its next turns; returns its row."""
        row = self.require(session)
        self.d.store.update("sessions", "id", session, {"spec": {**row["spec"], "toolsets": self.toolsets_of(toolsets)},
                                                        "updated_at": clock.now_iso()})
        return self.require(session)

    def require_quiet(self, session: str, what: str) -> dict[str, Any]:
        """The row of ``session`` when no turn of it is queued or running and (``delete``)
        no child of it runs and no completion waits for it; raises ``invalid_state`` naming them."""
        row = self.require(session)
        turns = self.d.jobs.list(session=session, kinds=("session_turn",), statuses=LIVE)
        busy = [t["id"] for t in turns]
        if what == "delete":
            busy += [c["id"] for c in self.children(session)] + [n["job"] for n in self.notes.pending(session)]
        if busy:
            raise ProtocolError("invalid_state", f"cannot {what} session {session!r} while {', '.join(busy)} "
                                f"{'is' if len(busy) == 1 else 'are'} not finished (stop them with /stop, or wait)",
                                {"session": session, "jobs": busy})
        return row

    def reset(self, session: str) -> int:
        """Forget every message of a quiet ``session``; returns how many there were."""
        self.require_quiet(session, "reset")
        with self.d.store.transaction() as db:
            removed = db.execute("DELETE FROM messages WHERE session = ?", (session,)).rowcount
            self.compactor.forget(db, session)
            self.d.store.update("sessions", "id", session, {"updated_at": clock.now_iso()})
        return removed

    def delete(self, session: str) -> int:
        """Delete a quiet ``session`` and its messages; returns how many messages it had."""
        self.require_quiet(session, "delete")
        with self.d.store.transaction() as db:
            removed = db.execute("DELETE FROM messages WHERE session = ?", (session,)).rowcount
            self.compactor.forget(db, session)
            db.execute("DELETE FROM sessions WHERE id = ?", (session,))
        return removed

    def history(self, session: str, limit: int = 10000) -> list[dict[str, Any]]:
        """Stored messages of ``session`` in order: ``{id, role, content, time, job, notification}``."""
        return self.d.store.all("SELECT * FROM messages WHERE session = ? ORDER BY id LIMIT ?", (session, limit))

    def busy_turn(self, session: str) -> dict[str, Any] | None:
        """The turn running in ``session`` now, if any."""
        rows = self.d.jobs.list(session=session, kinds=("session_turn",), statuses=ACTIVE)
        return rows[0] if rows else None

    def summary(self, row: dict[str, Any]) -> dict[str, Any]:
        """A session as listed by ``session.list``."""
        sid = row["id"]
        count = self.d.store.one("SELECT COUNT(*) AS n FROM messages WHERE session = ?", (sid,))["n"]
        return {"id": sid, "created_at": row["created_at"], "updated_at": row["updated_at"], "messages": count,
                "cwd": row["spec"].get("cwd"),
                "busy": self.busy_turn(sid) is not None, "toolsets": row["spec"].get("toolsets"),
                "pending_notifications": len(self.notes.pending(sid)),
                "running_children": len(self.children(sid)),
                "sent_tokens": self.compactor.sent_tokens(sid), "compact_at_tokens": self.compactor.limit(),
                "compactions": len(self.compactor.history_marks(sid))}

    def children(self, session: str) -> list[dict[str, Any]]:
        """This session's live children (background and foreground delegations)."""
        return self.d.jobs.list(session=session, kinds=("background", "delegation"),
                                statuses=LIVE)

    # turns ---------------------------------------------------------------

    def start_turn(self, session: str, text: str, *, notification: str | None = None,
                   resume: bool = True, idempotency_key: str | None = None) -> dict[str, Any]:
        """Queue a turn of ``session`` for ``text`` (a user message or a completion block);
        ``resume`` false: a restart ends it ``lost`` instead of resuming it (``hermesd.resume``);
        ``idempotency_key``: its stored form (``hermesd.idempotency``)."""
        row = self.require(session)
        if self.compactor.due(session):  # the compaction runs first: it is ahead in the session's pool
            try:
                self.compactor.submit(session, "limit")
            except ProtocolError:
                pass  # nothing older than the last turn to compact: the turn is sent as it is
        spec: dict[str, Any] = {"system_prompt": MAIN_SYSTEM_PROMPT}
        if notification:
            spec["notification"] = notification
        if not resume:
            spec["resume"] = False
        return self.d.runner.submit("session_turn", pools=(f"session:{session}",), session=session, goal=text,
                                    toolsets=row["spec"].get("toolsets") or [], depth=0,
                                    cwd=self.workdir(row), spec=spec, idempotency_key=idempotency_key)

    def spec_hook(self, row: dict[str, Any], spec: JobSpec) -> None:
        """The spec of a turn's child: the session's history as a turn is sent it (the latest
        summary and what came after it: :meth:`Compactor.sent`), roles alternating."""
        stored = [{"role": m["role"], "content": m["content"]} for m in self.compactor.sent(row["session"])]
        spec.part = TurnSpec(history=merge_roles(stored)).to_wire()

    def on_turn_terminal(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """Terminal hook (inside the transition's transaction): store the turn's
        messages — or at least its input when the child reported none — and
        acknowledge the notification it delivered."""
        result = self.d.runner.results.get(row["id"])
        messages = (result.messages if result else None) or [{"role": "user", "content": [{"type": "text", "text": row["goal"]}]}]
        notification = (row.get("spec") or {}).get("notification")
        now = clock.now_iso()
        for i, msg in enumerate(messages):
            content = msg.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            self.d.store.insert("messages", {"session": row["session"], "role": msg.get("role", "user"),
                                             "content": content or [], "time": now, "job": row["id"],
                                             "notification": notification if i == 0 else None})
        if notification:
            self.notes.acknowledge(notification)
        self.d.store.update("sessions", "id", row["session"], {"updated_at": now})
        reply = text_of(messages[-1]["content"]) if messages[-1].get("role") == "assistant" else ""
        return [self.d.events.record("session.turn", job=row["id"], session=row["session"],
                                     data={"status": row["status"], "reply": reply, "notification": notification})]

    # delivery ------------------------------------------------------------

    def deliver(self, session: str) -> None:
        """Give every pending notification of ``session`` its delivery turn (FIFO)."""
        if self.d.stopping or self.get(session) is None:
            return
        for note in self.notes.pending(session):
            turn = self.start_turn(session, note["block"], notification=note["job"])
            self.notes.queue(note["job"], turn["id"], note["attempts"] + 1)

    def on_event(self, event: dict[str, Any]) -> None:
        """Event listener: a background completion for a session → deliver (after this commit)."""
        if event["type"] == "async_delegation" and event.get("session"):
            self.d.loop.call_soon(self.deliver, event["session"])

    def restore(self) -> None:
        """At start-up: re-deliver what a dead daemon left undelivered."""
        for note in self.notes.queued():
            turn = self.d.jobs.get(note["turn"]) if note["turn"] else None
            if turn is None or turn["status"] in TERMINAL:
                self.notes.requeue(note["job"])
        sessions = {n["session"] for n in self.notes.pending() if n["session"]}
        for session in sorted(sessions):
            self.deliver(session)
