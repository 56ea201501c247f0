"""Compaction: what a session's turn is sent stays within its model's context window.

A session keeps every message (``messages``); what a turn is *sent* is the latest summary, if
any, and the messages after the ones it covers.  When that would pass ``compact_at_tokens``
(:meth:`Compactor.limit`: ``sessions.compact_at_tokens``, else ``sessions.compact_share`` of the
model's context window, :func:`hermesd.contract.providers.context_window`), the older part is compacted
before the turn runs: a ``session_compact`` child — the session's own model, no tools — gets the
previous summary and the older turns as a transcript and answers with one summary (goals,
decisions, what was delegated and what came back, open tasks, the user's facts).  The most
recent turns (up to ``keep_recent_tokens``, at least the last one) stay verbatim.

* The compaction job holds the session's ``session:<id>`` pool like a turn, so the turn that
  asked for it, and any completion delivered meanwhile, run after it: a notification that
  arrives during a compaction is delivered once, after it (its delivery turn waits in the pool).
* The summary is stored (``compactions``) in the transaction of the job's end and reused by every
  later turn, so the prefix a turn sends stays byte-identical — the prompt cache's rule
  (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching) — until the history
  has grown past the limit again.
* A compaction that fails (the model errors, a budget is spent) stores nothing: the session is
  as it was, a ``session.compaction_failed`` event says why, and the turn after it still runs.

Claude Agent SDK's compaction and Hermes Agent's context compressor do the same inside one
process; here it is a supervised job of its own, visible in ``ps`` and stopped like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermesd import clock
from hermesd.contract.providers import context_window
from hermesd.contract.states import LIVE
from hermesd.contract.tokens import estimate_tokens
from hermesd.protocol import ProtocolError
from hermesd.sessions.schema import COMPACT_KIND

if TYPE_CHECKING:
    from hermesd.context import Context
    from hermesd.sessions.service import Sessions

KIND = COMPACT_KIND

SUMMARY_HEADER = ("[Summary of the earlier conversation, made when it grew too long for the context window; "
                  "the messages after it are verbatim]\n")

INSTRUCTIONS = (
    "You are compacting the history of a long conversation between a user and an assistant (you) so that "
    "it can go on within the model's context window. Write one summary that replaces the transcript below "
    "for the assistant's next turns. Keep, as short, precise notes: the user's goals and preferences; every "
    "fact, name, number, path and decision the user gave or agreed to; what was delegated to subagents and "
    "what came back (with delegation ids); open tasks and questions; anything promised to the user. Leave "
    "out small talk and tool output that no longer matters. Write only the summary, no preamble.")

TRANSCRIPT_RESULT_BYTES = 2000
"""Bytes of each tool call or result kept in the transcript a compaction reads."""


class Compactor:
    """The compactions of one daemon's sessions (the sessions service's ``compactor``)."""

    def __init__(self, d: "Context", sessions: "Sessions"):
        self.d, self.sessions = d, sessions

    # what a turn is sent ---------------------------------------------------------

    def latest(self, session: str) -> dict[str, Any] | None:
        """The newest ``compactions`` row of ``session``, or None."""
        return self.d.store.one("SELECT * FROM compactions WHERE session = ? ORDER BY id DESC LIMIT 1", (session,))

    def sent(self, session: str) -> list[dict[str, Any]]:
        """The stored messages a turn of ``session`` is sent (``{id, role, content, job}``, in order):
        the latest summary as a user message, then every message after it."""
        last = self.latest(session)
        after = last["upto"] if last else 0
        rows = self.d.store.all("SELECT id, role, content, job FROM messages WHERE session = ? AND id > ? "
                                "ORDER BY id", (session, after))
        if last is None:
            return rows
        summary = {"id": last["upto"], "role": "user", "job": last["job"],
                   "content": [{"type": "text", "text": SUMMARY_HEADER + last["summary"]}]}
        return [summary, *rows]

    def sent_tokens(self, session: str) -> int:
        """The estimated tokens of the history a turn of ``session`` is sent now."""
        return sum(estimate_tokens(m["content"]) for m in self.sent(session))

    def limit(self) -> int:
        """``compact_at_tokens``: the configured one, else ``compact_share`` of the session model's window."""
        cfg = self.d.config.sessions
        if cfg.compact_at_tokens:
            return int(cfg.compact_at_tokens)
        window = cfg.context_window_tokens or context_window(self.d.config.model, self.d.config.context_windows)
        return int(window * cfg.compact_share)

    def keep_tokens(self) -> int:
        """How many tokens of the most recent turns stay verbatim (``keep_recent_tokens``, else a quarter of the limit)."""
        return int(self.d.config.sessions.keep_recent_tokens or self.limit() // 4)

    # compacting --------------------------------------------------------------------

    def due(self, session: str) -> bool:
        """Whether a turn of ``session`` would be sent more than :meth:`limit` and no compaction is queued."""
        return not self.pending(session) and self.sent_tokens(session) > self.limit()

    def pending(self, session: str) -> dict[str, Any] | None:
        """The compaction job of ``session`` that is queued or running, if any."""
        rows = self.d.jobs.list(session=session, kinds=(KIND,), statuses=LIVE)
        return rows[0] if rows else None

    def submit(self, session: str, reason: str) -> dict[str, Any]:
        """Queue a compaction of ``session`` in its pool (ahead of what is queued after this call);
        ``reason``: ``limit`` or ``requested``.  Returns the job row (the pending one if any);
        raises ``invalid_state`` when there is nothing to compact (one turn since the last summary)."""
        pending = self.pending(session)
        if pending is not None:
            return pending
        row = self.sessions.require(session)
        older, _ = self.split(session)
        if not [msg for msg in older if msg["id"] > (self.latest(session) or {}).get("upto", 0)]:
            raise ProtocolError("invalid_state", f"nothing to compact in session {session!r}: a turn is sent "
                                f"{self.sent_tokens(session)} tokens of history, all of it its most recent turn",
                                {"session": session})
        return self.d.runner.submit(KIND, pools=(f"session:{session}",), session=session, toolsets=[], depth=0,
                                    goal=f"compact the history of session {session}", cwd=self.sessions.workdir(row),
                                    spec={"compaction": {"reason": reason}, "max_turns": 1})

    def split(self, session: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(older, kept): the messages a turn is sent now, cut at a turn boundary so that the kept
        part is the most recent turns within :meth:`keep_tokens` (at least the last turn, never
        every turn).  The latest summary, if any, is always in the older part (it is summarised
        again with it)."""
        sent = self.sent(session)
        summary = sent[:1] if self.latest(session) is not None else []
        turns: list[list[dict[str, Any]]] = []
        for msg in sent[len(summary):]:  # a turn: the consecutive messages one job stored
            if turns and msg["job"] is not None and turns[-1][-1]["job"] == msg["job"]:
                turns[-1].append(msg)
            else:
                turns.append([msg])
        keep, budget = 0, self.keep_tokens()
        for turn in reversed(turns[1:]):  # the oldest turn is always summarised
            budget -= sum(estimate_tokens(m["content"]) for m in turn)
            if keep and budget < 0:
                break
            keep += 1
        older = summary + [m for t in turns[:len(turns) - keep] for m in t]
        return older, [m for t in turns[len(turns) - keep:] for m in t]

    def spec_hook(self, row: dict[str, Any], spec: Any) -> None:
        """The compaction child's spec, made when it starts (the history as it is then): the
        instructions and the older part as one transcript; what it covers kept in the job's row."""
        older, kept = self.split(row["session"])
        real = older[1:] if self.latest(row["session"]) is not None else older
        spec.system_prompt = INSTRUCTIONS
        spec.goal = INSTRUCTIONS + "\n\nThe transcript to summarise:\n\n" + transcript(older, self.limit())
        spec.max_turns = 1
        meta = {**(row.get("spec") or {}).get("compaction", {}),
                "upto": real[-1]["id"] if real else 0,
                "tokens_before": sum(estimate_tokens(m["content"]) for m in older + kept),
                "kept_tokens": sum(estimate_tokens(m["content"]) for m in kept)}
        self.d.store.update("jobs", "id", row["id"], {"spec": {**(row.get("spec") or {}), "compaction": meta}})

    def on_terminal(self, row: dict[str, Any], result: Any) -> list[dict[str, Any]]:
        """Inside the job's terminal transaction: store the summary of a completed compaction,
        or record why it failed (the session unchanged).  Returns the events to publish."""
        meta = (row.get("spec") or {}).get("compaction") or {}
        summary = (getattr(result, "summary", None) or "").strip() if result is not None else ""
        session, before, kept = row["session"], int(meta.get("tokens_before", 0)), int(meta.get("kept_tokens", 0))
        after = estimate_tokens(SUMMARY_HEADER + summary) + kept
        why = None
        if row["status"] != "completed" or not summary or not meta.get("upto"):
            why = (getattr(result, "error", None) if result is not None else None) or row.get("error") or (
                "nothing to compact: the history is its most recent turns" if not meta.get("upto")
                else f"the compaction ended {row['status']} without a summary")
        elif after >= before:  # a summary no shorter than what it replaces is kept out
            why = f"the summary ({after - kept} tokens) is no shorter than the turns it would replace"
        if why is not None:
            return [self.d.events.record("session.compaction_failed", job=row["id"], session=session,
                                         data={"session": session, "status": row["status"], "error": why})]
        self.d.store.insert("compactions", {"session": session, "upto": int(meta["upto"]), "summary": summary,
                                            "job": row["id"], "tokens_before": before, "tokens_after": after,
                                            "time": clock.now_iso()})
        return [self.d.events.record("session.compacted", job=row["id"], session=session,
                                     data={"session": session, "upto": int(meta["upto"]),
                                           "tokens_before": before, "tokens_after": after})]

    def history_marks(self, session: str) -> list[dict[str, Any]]:
        """Every compaction of ``session``: ``{upto, time, job, tokens_before, tokens_after}``, oldest first."""
        return self.d.store.all("SELECT upto, time, job, tokens_before, tokens_after FROM compactions "
                                "WHERE session = ? ORDER BY id", (session,))

    def forget(self, db: Any, session: str) -> None:
        """Remove ``session``'s compactions (in the caller's transaction: reset, delete)."""
        db.execute("DELETE FROM compactions WHERE session = ?", (session,))


def transcript(messages: list[dict[str, Any]], limit_tokens: int) -> str:
    """``messages`` as a plain transcript for the summariser (``User:``/``Assistant:`` lines, tool
    calls and results cut to :data:`TRANSCRIPT_RESULT_BYTES`), within ``limit_tokens``: the oldest
    lines go first when it is longer (a line says so)."""
    from hermesd.sessions.service import display_text

    lines = []
    for msg in messages:
        text = display_text(msg["content"], width=TRANSCRIPT_RESULT_BYTES)
        if text:
            lines.append(f"{'User' if msg['role'] == 'user' else 'Assistant'}: {text}")
    out, size = [], 0
    for line in reversed(lines):
        size += estimate_tokens(line) + 1
        if size > limit_tokens:
            out.insert(0, "[the oldest part of the transcript is left out: too long to summarise at once]")
            break
        out.insert(0, line)
    return "\n\n".join(out)
