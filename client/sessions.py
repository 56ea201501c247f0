"""``hermesctl send | chat | sessions | history``: talking to the persistent agent.

Thin: each command is one ``session.*`` request (slash commands are handled by
the daemon), plus event following to show turns as they end.

``chat`` on a terminal reads lines with prompt_toolkit (line editing, history
in ``HERMES_HOME/chat_history``) while a turn runs, so ``/stop`` and Ctrl-C
interrupt the turn at once; a reply is printed above the prompt when the
turn's ``session.turn`` event arrives.  Without a terminal (a pipe, a script)
it reads lines one by one and waits for each turn.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable

import click

from client import render
from client.approvals import FOLLOW_EVERY, answer_request, request_line
from client.common import (INTERRUPTED, conn, exit_for, idempotency_option, is_json, json_option, new_connection, out,
                           print_all, read_text, said_repeat, show, split, text_input, toolset_names, wait_job,
                           working_dir)
from client.connection import ClientError, start_command
from hermesd import paths
from hermesd.protocol import ProtocolError

CHAT_HELP = ("In this chat: /approvals lists the tool calls of this session waiting for a person, /approve ID "
             "lets one run, /deny ID [REASON] refuses it (the model is told the reason).\n"
             "Ctrl-C interrupts the running turn (as /stop does); Ctrl-C twice at the prompt, Ctrl-D or /quit "
             "leaves; Up/Down walk the history")
APPROVAL_COMMANDS = ("/approvals", "/approve", "/deny")
"""Slash commands the chat answers itself (the ``approvals.*`` ops), not sent to the session."""


def _reply_text(record: dict[str, Any]) -> str:
    text = record.get("summary") or ""
    if record.get("status") != "completed":
        text += f"\n[turn {record['status']}: {record.get('error') or record.get('exit_reason')}]"
    return text.strip()


def _send(session: str, text: str, toolsets: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"session": session, "text": text, "cwd": working_dir(), **extra}
    if toolsets:
        args["toolsets"] = toolsets
    return conn().call("session.send", **args)


@click.command()
@json_option
@click.argument("session")
@text_input("text", "message")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the turn to end and print the reply (for /compact: "
              "for the compaction to end, and print its outcome).")
@click.option("--toolsets", default=None,
              help="Comma-separated toolsets of a NEW session (default: the config's + delegation; "
                   "add kanban for an orchestrator).  Refused for an existing session: use "
                   "`hermesctl sessions toolsets`.")
@click.option("--no-resume", "no_resume", is_flag=True,
              help="Do not resume the turn at the next start if hermesd stops or dies during it: it ends "
                   "interrupted at a graceful stop, lost after a crash.")
@idempotency_option
def send(session: str, text: str | None, text_file: Any, wait_: bool, toolsets: str | None, no_resume: bool,
         idempotency_key: str | None) -> None:
    """Send TEXT to SESSION (created if new; '-' or --text-file reads it).
    Slash commands: /background PROMPT, /stop, /tasks, /compact, /help."""
    answer = _send(session, read_text(text, text_file, "text"), toolset_names(toolsets),
                   **({"resume": False} if no_resume else {}),
                   **({"idempotency_key": idempotency_key} if idempotency_key else {}))
    if "turn" not in answer:
        if wait_ and answer.get("command") == "compact":
            return wait_compaction(session, answer["compaction"])
        return show(answer, render.slash_text)
    said_repeat(answer, answer["turn"]["id"])
    if not wait_:
        return show(answer, lambda a: f"{a['turn']['id']} {a['turn']['status']}")
    record = wait_job(answer["turn"]["id"])
    show(record, _reply_text)
    exit_for(record)


# -- chat ------------------------------------------------------------------------------------------


class Chat:
    """One ``hermesctl chat``: sends lines, shows replies and delivered background results."""

    def __init__(self, session: str):
        self.session = session
        self.running: set[str] = set()  # turns sent and not yet ended
        self.lock = threading.Lock()
        self.since = conn().call("events_since", since=0, limit=1)["last_seq"]
        self.follower = new_connection()  # made here: the click context is not seen from another thread
        self.watcher = os.urandom(6).hex()  # this chat, to the daemon: someone to ask about the session's jobs
        self.watcher_conn = new_connection()

    def say(self, line: str) -> None:
        """``line`` on stdout (for people: control characters escaped)."""
        out(line)

    def error(self, err: Exception) -> None:
        """An error of one line of input: printed; the chat goes on."""
        self.say(f"error: {getattr(err, 'message', err)}")

    def handle(self, text: str, wait: Callable[[str], None] | None = None) -> None:
        """Send one line; a turn is waited for with ``wait(turn_id)``, or left to the event follower."""
        if text.split(maxsplit=1)[0] in APPROVAL_COMMANDS:
            return self.approval_command(text)
        try:
            answer = _send(self.session, text)
        except (ProtocolError, ClientError) as err:
            return self.error(err)
        if "turn" not in answer:
            help_text = f"\n{CHAT_HELP}" if answer.get("command") == "help" else ""
            return show(answer, lambda a: render.slash_text(a) + help_text)
        with self.lock:
            self.running.add(answer["turn"]["id"])
        if wait is not None:
            wait(answer["turn"]["id"])

    def approval_command(self, text: str) -> None:
        """``/approvals``, ``/approve ID``, ``/deny ID [REASON…]``: answered here, through ``approvals.*``."""
        words = text.split(maxsplit=2)
        try:
            if words[0] == "/approvals":
                found = conn().call("approvals.list", session=self.session)["approvals"]
                return self.say("\n".join(map(request_line, found)) or "no approval requests waiting")
            if len(words) < 2:
                return self.say(f"error: usage: {words[0]} ID" + (" [REASON]" if words[0] == "/deny" else ""))
            if words[0] == "/approve":
                return self.say(request_line(answer_request("approvals.approve", words[1])))
            return self.say(request_line(answer_request("approvals.deny", words[1],
                                                        reason=words[2] if len(words) > 2 else None)))
        except (ProtocolError, ClientError) as err:
            return self.error(err)

    def asking(self, event: dict[str, Any]) -> None:
        """An ``approval.*`` event of this session's jobs: shown, a request with how to answer it."""
        data = event.get("data") or {}
        if event["type"] == "approval.requested":
            self.say(f"[approval needed] {request_line(data)}\n"
                     f"  answer: /approve {data['id']}  or  /deny {data['id']} REASON")
        elif event["type"] == "approval.answered":
            self.say(f"[approval {data.get('id')} {data.get('state')}"
                     + (f": {data['reason']}" if data.get("reason") else "") + "]")

    def watch(self, stop: threading.Event) -> None:
        """Worker thread: tell the daemon every :data:`FOLLOW_EVERY` seconds that this chat is open
        (the session's requests then wait for an answer instead of being refused) until ``stop``."""
        watcher = self.watcher_conn
        try:
            while not stop.wait(FOLLOW_EVERY):
                try:
                    watcher.call("approvals.list", session=self.session, watcher=self.watcher, follow=True)
                except (ClientError, ProtocolError):
                    pass  # the daemon is away (the event follower says so): told again in a while
        finally:
            watcher.close()

    def open_to_requests(self) -> threading.Thread:
        """Count as someone to ask about the session's jobs (:meth:`watch` keeps it so), showing the
        requests already waiting; returns the watching thread (:meth:`close_to_requests` ends it)."""
        try:
            found = conn().call("approvals.list", session=self.session, watcher=self.watcher, follow=True)
            for request in found["approvals"]:
                self.asking({"type": "approval.requested", "data": request})
        except (ClientError, ProtocolError) as err:
            self.error(err)
        self.watching = threading.Event()
        thread = threading.Thread(target=self.watch, args=(self.watching,), daemon=True)
        thread.start()
        return thread

    def close_to_requests(self, thread: threading.Thread) -> None:
        """The chat leaves: the session's new requests no longer wait for it."""
        self.watching.set()
        thread.join(2.0)
        try:
            conn().call("approvals.list", session=self.session, watcher=self.watcher, leave=True)
        except (ClientError, ProtocolError):
            pass  # the daemon is away: it forgets the chat after 30 s of silence anyway

    def stop(self) -> None:
        """Interrupt the running turn and its children (``/stop``)."""
        self.handle("/stop")

    def follow(self, show_turns: bool, stop: threading.Event) -> None:
        """Worker thread: print delivered background results (and, with ``show_turns``,
        every reply of this session as its turn ends)."""
        follower = self.follower
        try:
            for event in follower.follow(self.since, idle=0.5, lost=self.lost):
                if stop.is_set():
                    return
                data = event.get("data") or {}
                if event["type"].startswith("approval.") and event.get("session") == self.session:
                    self.asking(event)
                if event["type"] != "session.turn" or event.get("session") != self.session:
                    continue
                with self.lock:
                    mine = event.get("job") in self.running
                    self.running.discard(event.get("job"))
                if data.get("notification"):
                    self.say(f"[background result {data['notification']} delivered]\nagent> {data.get('reply', '')}")
                elif mine and show_turns:
                    text = data.get("reply") or ""
                    if data.get("status") != "completed":
                        rec = follower.call("job", id=event["job"])
                        text = _reply_text(rec)
                    self.say(f"agent> {text}")
        except (ClientError, ProtocolError) as err:
            self.say(f"[stopped following events: {err}]")
        finally:
            follower.close()

    def lost(self, why: str | None) -> None:
        """The event follower lost the daemon (``why``), or found it again (None): said at once."""
        if why is None:
            return self.say("[hermesd is back: go on]")
        with self.lock:
            turns = sorted(self.running)
        what = (f"the turn {', '.join(turns)} goes on, or ends lost, once hermesd is back; " if turns else "")
        self.say(f"[{why.split('; start it with')[0]}; {what}start it with "
                 f"`{start_command(self.follower.sockets)}`: the session and its history are kept]")

    def run_terminal(self) -> None:
        """The interactive loop on a terminal (prompt_toolkit)."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory
        from prompt_toolkit.patch_stdout import patch_stdout

        history = paths.hermes_home() / "chat_history"
        try:
            paths.ensure_private_dir(history.parent)
            prompt: Any = PromptSession(history=FileHistory(str(history)))
        except OSError:
            prompt = PromptSession()
        stop = threading.Event()
        with patch_stdout(raw=True):
            threading.Thread(target=self.follow, args=(True, stop), daemon=True).start()
            watching = self.open_to_requests()
            armed = False  # a Ctrl-C at the prompt with nothing running: the next one leaves
            while True:
                try:
                    text = prompt.prompt("you> ")
                except KeyboardInterrupt:
                    with self.lock:
                        busy = bool(self.running)
                    if busy:
                        self.say("interrupting the turn… (Ctrl-C again to leave)")
                        self.stop()
                    elif armed:
                        break
                    else:
                        self.say("(Ctrl-C again, Ctrl-D or /quit to leave)")
                    armed = True
                    continue
                except EOFError:
                    break
                armed = False
                if text.strip() in ("/quit", "/exit"):
                    break
                if text.strip():
                    self.handle(text)
            self.close_to_requests(watching)
        stop.set()

    def run_lines(self) -> None:
        """Without a terminal: read lines in turn, wait for each turn (Ctrl-C stops it)."""
        stop = threading.Event()
        threading.Thread(target=self.follow, args=(False, stop), daemon=True).start()
        while True:
            try:
                text = input("you> ")
            except EOFError:
                click.echo()
                break
            if text.strip() in ("/quit", "/exit"):
                break
            if text.strip():
                self.handle(text, self._wait)
        stop.set()

    def _wait(self, turn: str) -> None:
        try:
            record = wait_job(turn, quiet=True)
        except KeyboardInterrupt:
            self.stop()
            record = wait_job(turn, quiet=True)
        with self.lock:
            self.running.discard(turn)
        show(record, lambda r: f"agent> {_reply_text(r)}")


@click.command()
@json_option
@click.argument("session", default="main")
def chat(session: str) -> None:
    """Talk to SESSION interactively (default: main): line editing and history, Ctrl-C or
    /stop interrupts the running turn, Ctrl-C twice or Ctrl-D leaves, /help lists the
    commands.  Background results appear as they are delivered.  With --json (or
    without a terminal) each line is sent in turn and each turn's record printed."""
    talk = Chat(session)
    out(f"session {session}: type a message, /help for commands, Ctrl-D to leave")
    try:
        if sys.stdin.isatty() and sys.stdout.isatty() and not is_json():
            talk.run_terminal()
        else:
            talk.run_lines()
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
    sys.exit(0)


# -- sessions and their history ----------------------------------------------------------------------


def _summary_line(row: dict[str, Any]) -> str:
    return (f"{row['id']:<20} {row['messages']:>5} messages  {'busy' if row['busy'] else 'idle'}  "
            f"{row['running_children']} children  {row['pending_notifications']} pending  "
            f"toolsets {render.value_text(row.get('toolsets'))}")


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def sessions(ctx: click.Context) -> None:
    """Sessions of the persistent agent: list (the default), show, compact, toolsets, reset, delete."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(sessions_list)


@sessions.command("list")
@json_option
def sessions_list() -> None:
    """List sessions: messages, busy, pending notifications, running children, toolsets."""
    print_all(conn().call("session.list")["sessions"], _summary_line, "no sessions")


@sessions.command("show")
@json_option
@click.argument("session")
def sessions_show(session: str) -> None:
    """Show SESSION: its counts, toolsets and working directory."""
    show(conn().call("session.get", session=session), render.fields_text)


@sessions.command("compact")
@json_option
@click.argument("session")
def sessions_compact(session: str) -> None:
    """Summarise the older part of SESSION's history now (after a running turn, before the next):
    its turns are then sent the summary and the most recent turns; every message stays in
    `history`.  Waits for the compaction and prints the tokens a turn is sent before and after."""
    wait_compaction(session, conn().call("session.compact", session=session)["compaction"])


def wait_compaction(session: str, job: dict[str, Any]) -> None:
    """Wait for the compaction ``job`` (its record) of ``session`` to end; print how many tokens of
    history a turn is sent before and after (or why the session is as it was: then exit 10)."""
    rec = wait_job(job["id"])
    marks = conn().call("session.history", session=session, limit=1).get("compactions") or []
    done = next((c for c in marks if c["job"] == job["id"]), None)
    if is_json():
        render.emit_json({"session": session, "compaction": rec, "result": done})
    elif done is not None:
        out(f"session {session}: compacted by {job['id']}: a turn is sent {done['tokens_before']} → "
            f"{done['tokens_after']} tokens of history")
    else:
        out(f"session {session}: compaction {job['id']} ended {rec['status']}; the session is as it was"
            + (f": {rec['error']}" if rec.get("error") else ""))
    exit_for(rec if done is not None else {"status": "failed"})


@sessions.command("toolsets")
@json_option
@click.argument("session")
@click.argument("toolsets")
def sessions_toolsets(session: str, toolsets: str) -> None:
    """Set SESSION's toolsets (comma-separated; delegation is always added) for its next turns."""
    show(conn().call("session.configure", session=session, toolsets=split(toolsets) or []), _summary_line)


@sessions.command("reset")
@json_option
@click.argument("session")
def sessions_reset(session: str) -> None:
    """Forget SESSION's messages (it starts a new conversation; refused while a turn runs)."""
    show(conn().call("session.reset", session=session), lambda r: f"session {r['session']}: "
         f"{render.counted(r['messages_removed'], 'message')} forgotten")


@sessions.command("delete")
@json_option
@click.argument("session")
def sessions_delete(session: str) -> None:
    """Delete SESSION and its history (refused while a turn or a child of it runs)."""
    show(conn().call("session.delete", session=session), lambda r: f"session {r['session']} deleted")


@click.command()
@json_option
@click.argument("session")
def history(session: str) -> None:
    """Print SESSION's messages in order (with --json: one per line, with id, role, content, time,
    notification; then one line per compaction, and one per turn that did not complete).  A line
    marks where a compaction summarised the messages above it for the turns after it (every
    message stays here), and one under a turn that did not complete says how it ended and why."""
    reply = conn().call("session.history", session=session)
    marks = {c["upto"]: c for c in reply.get("compactions") or []}
    unfinished = {t["job"]: t for t in reply.get("unfinished") or []}
    last = {msg["job"]: msg["id"] for msg in reply["messages"]}  # a turn's end: under its last message
    for msg in reply["messages"]:
        if is_json():
            render.emit_json(msg)
            continue
        mark = f" (delivered {msg['notification']})" if msg["notification"] else ""
        out(f"[{msg['time']}] {msg['role']}{mark}: {msg['content']}")
        turn = unfinished.get(msg["job"])
        if turn is not None and last[msg["job"]] == msg["id"]:
            out(f"── turn {turn['job']} {turn['status']}: {turn['error'] or 'no reply'} ──")
        if msg.get("id") in marks:
            out(_compaction_line(marks[msg["id"]]))
    for compaction in reply.get("compactions") or [] if is_json() else []:
        render.emit_json({"compaction": compaction})
    for turn in reply.get("unfinished") or [] if is_json() else []:
        render.emit_json({"unfinished": turn})


def _compaction_line(c: dict[str, Any]) -> str:
    return (f"── [{c['time']}] compacted by {c['job']}: the messages above are summarised for the turns after "
            f"this line ({c['tokens_before']} → {c['tokens_after']} tokens sent) ──")


COMMANDS = (send, chat, sessions, history)
