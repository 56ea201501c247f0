"""The ``hermesctl top`` TUI (textual): live job tree, caps, batch progress, events, log.

Two worker threads talk to the daemon, each with its own :class:`Connection`
(zmq sockets are not thread-safe): the *follower* reads every event exactly
once with ``Connection.follow`` and survives daemon restarts (the backlog is
fetched again from the last seq it saw); the *controller* polls ``status``,
tails the log panel's job with ``logs`` and carries out the keys' requests
(``cancel``, ``approvals.approve``, ``approvals.deny``).  Neither touches the UI: both put messages on an inbox queue
that the app drains on a timer, so a slow or absent daemon never freezes
the screen.

The layout fits 80×24: below 110 columns the caps and batches go under the job
tree (which then has the whole width, so goals are seen), the tree takes what
they and a short event log leave, running jobs come first in it (then finished ones, the
newest first), each row fits the tree's width (a long goal gives up its tail, so that model
calls and cost stay in view), and nothing scrolls sideways (no stray scrollbar glyphs).  ``c`` asks
before it cancels (:class:`ConfirmCancel`).  A job waiting for a person shows ``APPROVAL? ID``
after its status (the pending requests are listed above the batches): ``a`` approves its
request after asking (:class:`ConfirmApprove`), ``d`` denies it with a reason
(:class:`DenyReason`).
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Input, RichLog, Static, Tree

from client import render
from client.connection import ClientError, Connection
from client.top_board import Board, Node, fetch_jobs, load
from client.common import DEFAULT_TIMEOUT, TERMINAL, who
from hermesd.protocol import ProtocolError

STATUS_STYLE = {"queued": "yellow", "starting": "cyan", "running": "bold cyan", "completed": "green",
                "failed": "bold red", "interrupted": "magenta", "timed_out": "red", "cancelled": "dim",
                "lost": "bold red"}
RETRY_SECONDS = 1.0
DENY_REASON = "denied in hermesctl top"
"""The reason a request denied with ``d`` gives when none is typed."""
STATUS_TIMEOUT = 5.0
"""Seconds the TUI waits for ``status`` before it shows the daemon as disconnected."""


class Confirm(ModalScreen[bool]):
    """Asks before a key acts: ``y`` goes ahead, ``n`` or Escape does not.  ``question`` is the
    first line, ``detail`` (cut to 120 characters) the second, ``yes``/``no`` what each key does."""

    DEFAULT_CSS = """
    Confirm { align: center middle; }
    #question { width: 64; max-width: 90%; height: auto; border: thick $error; padding: 1 2; background: $surface; }
    """
    BINDINGS = [("y", "answer(True)", "Yes"), ("n", "answer(False)", "No"), ("escape", "answer(False)", "No")]

    def __init__(self, question: str, detail: str, yes: str, no: str):
        super().__init__()
        self.text = f"{question}\n{render.short(detail, 120)}\n\ny: {yes}    n or Esc: {no}"

    def compose(self) -> ComposeResult:
        """The question, its detail and the keys."""
        yield Static(Text(self.text), id="question")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class ConfirmCancel(Confirm):
    """Asks before ``c`` cancels a job."""

    def __init__(self, job: str, goal: str):
        super().__init__(f"Cancel {job}?", goal, "cancel it", "keep it running")


class ConfirmApprove(Confirm):
    """Asks before ``a`` approves a request: what it runs is shown."""

    def __init__(self, request: dict[str, Any]):
        super().__init__(f"Approve {request['id']} of {request['job']}?", render.approval_what(request),
                         "let it run", "keep it waiting")


class DenyReason(ModalScreen["str | None"]):
    """Asks why ``d`` denies a request: Enter denies it with the reason typed (or
    :data:`DENY_REASON` when none is), Escape keeps it waiting (dismissed with None)."""

    DEFAULT_CSS = """
    DenyReason { align: center middle; }
    #deny { width: 64; max-width: 90%; height: auto; border: thick $error; padding: 1 2; background: $surface; }
    """
    BINDINGS = [("escape", "keep", "Keep it waiting")]

    def __init__(self, request: dict[str, Any]):
        super().__init__()
        self.request = request

    def compose(self) -> ComposeResult:
        """The question, what the request runs, the reason's input line."""
        with Vertical(id="deny"):
            yield Static(Text(f"Deny {self.request['id']} of {self.request['job']}?\n"
                              f"{render.short(render.approval_what(self.request), 120)}\n"
                              "Why (the model is told)? Enter denies, Esc keeps it waiting"))
            yield Input(placeholder=DENY_REASON, id="reason")

    def on_input_submitted(self, submitted: Input.Submitted) -> None:
        """Enter: deny with the reason typed, or the default one."""
        self.dismiss(submitted.value.strip() or DENY_REASON)

    def action_keep(self) -> None:
        """Escape: no answer."""
        self.dismiss(None)


class TopApp(App):
    """``hermesctl top``.  ``runtime_dir``/``timeout`` as for :class:`Connection`; ``refresh`` in seconds."""

    TITLE = "top"
    ENABLE_COMMAND_PALETTE = False  # no "^p palette" in the key line: nothing there for hermesd
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    CSS = """
    #main { height: 1fr; }
    #jobs { width: 1fr; border: round $primary; overflow-x: hidden; scrollbar-size-vertical: 1; }
    #side { width: 34; max-width: 45%; }
    #caps, #batches { height: auto; max-height: 50%; border: round $secondary; padding: 0 1; }
    #events { height: 25%; min-height: 4; max-height: 10; border: round $secondary; overflow-x: hidden;
              scrollbar-size-vertical: 1; }
    #log { height: 40%; border: round $accent; display: none; }
    #log.shown { display: block; }
    .-narrow #main { layout: vertical; }
    .-narrow #side { width: 1fr; max-width: 100%; height: auto; layout: horizontal; }
    .-narrow #caps, .-narrow #batches { width: 1fr; max-height: 6; }
    .-narrow #events { height: 5; min-height: 5; }
    """
    BINDINGS = [("c", "cancel_job", "Cancel job"), ("a", "approve", "Approve"), ("d", "deny", "Deny"),
                ("l", "toggle_log", "Log"), ("escape", "close_log", "Close log"), ("q", "quit", "Quit")]

    def __init__(self, runtime_dir: Any = None, timeout: float = DEFAULT_TIMEOUT, refresh: float = 1.0):
        super().__init__()
        self.runtime_dir, self.timeout, self.refresh_seconds = runtime_dir, timeout, refresh
        self.board = Board()
        self.connected = False
        self.log_job: str | None = None
        self._inbox: queue.Queue = queue.Queue()
        self._requests: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follower, name="top-follow", daemon=True),
                         threading.Thread(target=self._controller, name="top-control", daemon=True)]
        self._tree_nodes: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        """Header; the job tree beside caps and batches; recent events; the log panel; key help."""
        yield Header(icon="")
        with Horizontal(id="main"):
            tree: Tree = Tree("hermesd", id="jobs")
            tree.show_root = False
            tree.border_title = "jobs"
            yield tree
            with Vertical(id="side"):
                yield Static("", id="caps")
                yield Static("", id="batches")
        yield RichLog(id="events", max_lines=500)
        yield RichLog(id="log", max_lines=5000, wrap=True)
        yield Footer()

    def on_mount(self) -> None:
        """Start the workers and the inbox timer."""
        self.jobs_tree = self.query_one("#jobs", Tree)
        self.caps_panel, self.batch_panel = self.query_one("#caps", Static), self.query_one("#batches", Static)
        self.events_panel, self.log_panel = self.query_one("#events", RichLog), self.query_one("#log", RichLog)
        for widget, title in ((self.caps_panel, "caps"), (self.batch_panel, "batches"),
                              (self.events_panel, "recent events")):
            widget.border_title = title
        self.jobs_tree.focus()
        self.sub_title = "connecting…"
        for thread in self._threads:
            thread.start()
        self.set_interval(0.1, self._drain)

    def on_unmount(self) -> None:
        """Stop the workers (each wakes within a second) and wait for them."""
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)

    # workers (threads; never touch widgets) -------------------------------------------

    def _post(self, kind: str, payload: Any = None) -> None:
        self._inbox.put((kind, payload))

    def _follower(self) -> None:
        conn = Connection(self.runtime_dir, timeout=self.timeout)
        since: int | None = None
        try:
            while not self._stop.is_set():
                try:
                    if since is None:
                        board = load(conn, Board())
                        since = board.last_seq
                        self._post("board", board)
                    for event in conn.follow(since, idle=0.5, stop_after=RETRY_SECONDS):
                        since = event["seq"]
                        self._post("event", event)
                        if self._stop.is_set():
                            return
                except (ClientError, ProtocolError):
                    conn.close()  # the controller reports the connection; just try again
                    self._stop.wait(RETRY_SECONDS)
        finally:
            conn.close()

    def _controller(self) -> None:
        # a live view notices a silent daemon within seconds, whatever --timeout says
        conn = Connection(self.runtime_dir, timeout=min(self.timeout, STATUS_TIMEOUT))
        offsets: dict[str, int] = {}
        tried: set[str] = set()
        try:
            while not self._stop.is_set():
                try:
                    request = self._requests.get(timeout=min(self.refresh_seconds, 0.25))
                except queue.Empty:
                    request = None
                try:
                    if request is not None:
                        self._carry_out(conn, request)
                    self._post("status", conn.call("status"))
                    if self.log_job:
                        self._tail(conn, self.log_job, offsets)
                    snapshot = Board()
                    snapshot.jobs = dict(self.board.jobs)  # one C-level copy: safe against the UI thread
                    wanted = [p for p in snapshot.missing_parents() if p not in tried][:10]
                    tried.update(wanted)
                    if wanted:
                        self._post("jobs", fetch_jobs(conn, wanted))
                except (ClientError, ProtocolError) as err:
                    self._post("disconnected", err.message)
                    conn.close()
                    self._stop.wait(RETRY_SECONDS)
        finally:
            conn.close()

    def _carry_out(self, conn: Connection, request: tuple[str, ...]) -> None:
        action, job = request[:2]
        if action in ("approve", "deny"):  # job: the request's id here
            extra = {"reason": request[2]} if action == "deny" else {}
            try:
                answer = conn.call(f"approvals.{action}", id=job, by=who(), pid=os.getpid(), **extra)
                self._post("note", (f"{job} {answer['state']}", "information"))
            except ProtocolError as err:
                self._post("note", (f"{action} {job}: {err.message}", "error"))
        elif action == "cancel":
            try:
                rec = conn.call("cancel", id=job)
                self._post("note", (f"cancel requested: {job} ({rec['status']})", "information"))
            except ProtocolError as err:
                self._post("note", (f"cancel {job}: {err.message}", "error"))

    def _tail(self, conn: Connection, job: str, offsets: dict[str, int]) -> None:
        while True:
            chunk = conn.call("logs", id=job, offset=offsets.get(job, -65536))
            offsets[job] = chunk["offset"]
            if chunk["data"]:
                self._post("log", (job, chunk["data"]))
            if chunk["offset"] >= chunk["size"]:
                return

    # the UI side ---------------------------------------------------------------------

    def _drain(self) -> None:
        if not self.jobs_tree.is_attached:
            return  # shutting down
        changed = False
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                break
            changed |= self._take(kind, payload)
        if changed:
            self._show()

    def _take(self, kind: str, payload: Any) -> bool:
        if kind == "board":
            payload.jobs = {**self.board.jobs, **payload.jobs}
            self.board = payload
            for event in list(payload.events)[-20:]:
                self._show_event(event)
        elif kind == "event":
            self.board.apply(payload)
            self._show_event(payload)
        elif kind == "status":
            self.board.status = payload
            self.connected = True
        elif kind == "jobs":
            self.board.add_jobs(payload)
        elif kind == "disconnected":
            self.connected = False
            self.sub_title = f"disconnected — retrying: {payload}"
            return False
        elif kind == "log" and payload[0] == self.log_job:
            self.log_panel.write(Text(payload[1].rstrip("\n")))
        elif kind == "note":
            self.notify(payload[0], severity=payload[1], markup=False)
        return kind in ("board", "event", "status", "jobs")

    def _show_event(self, event: dict[str, Any]) -> None:
        line = render.event_text(event).splitlines()[0]  # its time of day only: the room is the gist's
        self.events_panel.write(Text(line.replace(str(event.get("time")), str(event.get("time"))[11:19], 1)))

    def _show(self) -> None:
        if self.connected:
            self.sub_title = self.board.headline()
        self.caps_panel.update(Text("\n".join(self.board.caps(bar_width=8)) or "(no caps yet)"))
        waiting = self.board.approval_lines()
        self.batch_panel.border_title = "approvals · batches" if waiting else "batches"
        self.batch_panel.update(Text("\n".join([*waiting, *self.board.batches()]) or "(no batch jobs)"))
        room = self.jobs_tree.scrollable_content_region.width - 1  # less its scrollbar, should one show
        cursor = self.jobs_tree.cursor_node
        self._sync(self.jobs_tree.root, self.board.tree(room if room > 0 else None))
        self._keep_cursor((cursor.data or {}).get("key") if cursor is not None else None)
        if self.jobs_tree.cursor_line < 0 and self.jobs_tree.root.children:
            self.jobs_tree.cursor_line = 0  # the first job (running ones come first) is selected from the start

    def _sync(self, parent: Any, wanted: list[Node]) -> None:
        """Make ``parent``'s children match ``wanted``, in its order (live rows first, then the
        newest finished: :meth:`Board.tree`).  A row already in its place is updated in place
        (it keeps its expansion); one whose place changed is added again where it belongs,
        expanded as it was (:meth:`_keep_cursor` keeps the cursor on it)."""
        keys = {node.key for node in wanted}
        for child in list(parent.children):
            if child.data["key"] not in keys:
                self._forget(child)
        have = {child.data["key"]: child for child in parent.children}
        for index, node in enumerate(wanted):
            label = Text(node.label, style=STATUS_STYLE.get(node.status or "", ""))
            tnode, expand = have.pop(node.key, None), True
            if tnode is not None and parent.children[index] is not tnode:  # moved: added again below
                expand = tnode.is_expanded
                self._forget(tnode)
                tnode = None
            if tnode is None:
                tnode = parent.add(label, data={"key": node.key, "job": node.job}, before=index, expand=expand)
            else:
                tnode.set_label(label)
            tnode.allow_expand = bool(node.children)
            self._tree_nodes[node.key] = tnode
            self._sync(tnode, node.children)

    def _forget(self, tnode: Any) -> None:
        """Remove ``tnode`` from the tree, and it and its children from :meth:`node_for`."""
        for child in list(tnode.children):
            self._forget(child)
        if self._tree_nodes.get(tnode.data["key"]) is tnode:
            del self._tree_nodes[tnode.data["key"]]
        tnode.remove()

    def _keep_cursor(self, key: str | None) -> None:
        """Put the cursor back on the row of ``key`` (where it was before :meth:`_sync`) when
        that row was added again elsewhere."""
        target = self._tree_nodes.get(key) if key is not None else None
        if target is None or self.jobs_tree.cursor_node is target:
            return
        self.jobs_tree.get_node_at_line(0)  # lays the lines out again: the target's line is known
        self.jobs_tree.move_cursor(target)

    def node_for(self, job: str) -> Any:
        """The tree node of job ``job`` (None when not shown)."""
        return self._tree_nodes.get(job)

    def selected_job(self) -> str | None:
        """The job id under the tree's cursor (None on a session, group or summary line)."""
        node = self.jobs_tree.cursor_node
        return (node.data or {}).get("job") if node is not None else None

    # keys ----------------------------------------------------------------------------

    def action_cancel_job(self) -> None:
        """``c``: after a ``y`` to :class:`ConfirmCancel`, cancel the selected job
        (interrupted, it ends cancelled with its partial output)."""
        job = self.selected_job()
        if job is None:
            return self.notify("select a job first", severity="warning")
        rec = self.board.jobs.get(job, {})
        if rec.get("status") in TERMINAL:
            return self.notify(f"{job} has already finished", severity="warning")

        def answered(yes: bool | None) -> None:
            if yes:
                self._requests.put(("cancel", job))

        self.push_screen(ConfirmCancel(job, rec.get("goal") or ""), answered)

    def _selected_request(self) -> dict[str, Any] | None:
        request = self.board.approval_of(self.selected_job())
        if request is None:
            self.notify(f"the selected job waits for no approval ({len(self.board.approvals)} waiting: select a "
                        "job marked APPROVAL?)", severity="warning")
        return request

    def action_approve(self) -> None:
        """``a``: after a ``y`` to :class:`ConfirmApprove`, approve the selected job's request (the tool runs)."""
        request = self._selected_request()
        if request is not None:
            self.push_screen(ConfirmApprove(request), lambda yes: yes and self._requests.put(("approve", request["id"])))

    def action_deny(self) -> None:
        """``d``: deny the selected job's request with the reason :class:`DenyReason` asks for."""
        request = self._selected_request()
        if request is not None:
            self.push_screen(DenyReason(request),
                             lambda why: why is not None and self._requests.put(("deny", request["id"], why)))

    def action_toggle_log(self) -> None:
        """``l``: show the selected job's log, following it; again to hide it."""
        panel = self.log_panel
        job = self.selected_job()
        if panel.has_class("shown") and (job is None or job == self.log_job):
            return self.action_close_log()
        if job is None:
            return self.notify("select a job first", severity="warning")
        self.log_job = job
        panel.clear()
        panel.border_title = f"log of {job}"
        panel.add_class("shown")

    async def action_help_quit(self) -> None:
        """``ctrl+c`` (textual's binding, after copying selected text): quit, as ``q`` does and as
        top and htop do (textual only says to press ctrl+q)."""
        await self.action_quit()

    def action_close_log(self) -> None:
        """``escape``: hide the log panel."""
        self.log_job = None
        self.log_panel.remove_class("shown")
