"""The child's side of a job's journal (format: :mod:`hermesd.journal`): write each step, replay them.

:class:`Journal` appends one entry per step and fsyncs it before the loop goes on,
so what was paid for (a model call) or done (a tool call) survives a crash; a write
that fails (a full disk) holds the run until it succeeds or the job fails
(:class:`Unwritable`), never a step taken unjournalled.
:func:`replay` turns the entries of an earlier child back into the state of the
run: its messages, counters and trace, and the tool calls of the last model call
that have no result yet.  A tool call that was started but has no result was
running when the child died: it is not run again unless its tool is declared
safe to repeat (:attr:`child.tools.Tool.repeatable`); the model gets
:func:`interrupted_result` instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from child import messages as m
from child import redact
from hermesd import journal as stored
from hermesd.contract.wire import JobSpec

INTERRUPTED = ("not finished: hermesd restarted while this tool call ran, so its effect is unknown "
               "(it may have run in full, in part or not at all); check its effect before you run it again")
"""The result a tool call interrupted by a restart gets."""


RETRY_SECONDS = (0.05, 2.0)
"""The first and the longest pause between two attempts of a journal write that failed (doubling)."""


class Unwritable(Exception):
    """A journal entry that could not be written: for ``seconds`` (the text names the journal and
    the error), or not before the run was stopped (``stopped``).  The step it records is not taken."""

    def __init__(self, text: str, stopped: bool = False):
        super().__init__(text)
        self.stopped = stopped


class Journal:
    """The journal at ``path``, opened for appending (created 0600 if missing).

    A step is never taken unjournalled: a write that fails (the disk is full, an I/O error, a
    read-only file system) is undone (the file cut back to its last whole line) and tried again,
    the pauses doubling from ``RETRY_SECONDS[0]`` to ``RETRY_SECONDS[1]``, each attempt reported
    by ``waiting(what)`` (the run's activity: so a child waiting for its disk is not stale), for
    up to ``wait_seconds``; then :class:`Unwritable` is raised.  ``pause(seconds)`` sleeps and
    returns True when the run is stopped meanwhile (:class:`Unwritable` with ``stopped``).  A last
    line without its newline (a write an earlier child did not finish) is cut off at the open, so
    that the next entry starts a line of its own.
    """

    def __init__(self, path: str, wait_seconds: float = JobSpec.journal_wait_seconds,
                 waiting: Callable[[str], None] = lambda what: None,
                 pause: Callable[[float], bool] = lambda seconds: bool(time.sleep(seconds))):
        self.path, self.wait_seconds, self.waiting, self.pause = path, float(wait_seconds), waiting, pause
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.size = whole_lines(self.fd)
        if self.size < os.fstat(self.fd).st_size:
            os.ftruncate(self.fd, self.size)

    def write(self, entry: dict[str, Any], wait: bool = True) -> None:
        """Append ``entry`` as one line, every known secret value redacted (:mod:`child.redact`: a
        key the model wrote into a reply is no more kept here than in the trajectory), and fsync it
        before returning; raises :class:`Unwritable` (see the class).  With ``wait`` false, one
        attempt: a failure is said in the job's log and the entry left out (for an entry no step
        depends on)."""
        entry = redact.current().data(entry)
        data = (json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()
        began, delay, failed = time.monotonic(), RETRY_SECONDS[0], None
        while True:
            try:
                self._append(data)
            except OSError as exc:
                error = exc.strerror or str(exc)
                if not wait:
                    print(f"journal {self.path}: {error}; the final answer is not journaled (no step follows it: "
                          f"a restart before the job's end is stored asks the model again)", file=sys.stderr, flush=True)
                    return
                if failed is None:
                    print(f"journal {self.path}: {error}; waiting to write it (up to {self.wait_seconds:g}s)",
                          file=sys.stderr, flush=True)
                failed = error
                left = self.wait_seconds - (time.monotonic() - began)
                if left <= 0:
                    raise Unwritable(f"its journal {self.path} could not be written for {self.wait_seconds:g}s: "
                                     f"{error}") from None
                self.waiting(f"waiting to write its journal: {error}")
                if self.pause(min(delay, left)):
                    raise Unwritable(f"stopped while its journal {self.path} could not be written: {error}",
                                     stopped=True) from None
                delay = min(delay * 2, RETRY_SECONDS[1])
                continue
            if failed is not None:
                print(f"journal {self.path}: written again after {time.monotonic() - began:.1f}s ({failed})",
                      file=sys.stderr, flush=True)
            return

    def _append(self, data: bytes) -> None:
        """One attempt: ``data`` written and fsynced, or the file cut back to where it was and
        OSError raised (a partial line or one whose fsync failed is not left to be built upon:
        after a failed fsync the pages may be dropped, so the whole line is written again)."""
        try:
            rest = data
            while rest:
                rest = rest[os.write(self.fd, rest):]
            os.fsync(self.fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.size)
            raise
        self.size += len(data)

    def message(self, message: dict[str, Any], turn: int, api_calls: int, tokens: dict[str, int]) -> None:
        """A message added to the conversation; a user message of tool results only is not written
        (its results were, one by one).  A reply without a tool call is the final answer: no step
        follows it, so it is not waited for when the disk refuses it (the job ends; its end is the
        daemon's to store, and a restart before that asks the model again, as for a call in flight)."""
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list) and content \
                and all(b.get("type") == "tool_result" for b in content):
            return
        final = message.get("role") == "assistant" and not (
            isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content))
        self.write({"t": "message", "message": message, "turn": turn, "api_calls": api_calls, "tokens": tokens},
                   wait=not final)

    def started(self, call: dict[str, Any]) -> None:
        """Tool call ``call`` (a ``tool_use`` block) is about to run."""
        self.write({"t": "tool_started", "id": call.get("id"), "name": call.get("name")})

    def result(self, block: dict[str, Any], trace: dict[str, Any]) -> None:
        """A tool call's ``tool_result`` block and its trace entry."""
        self.write({"t": "tool_result", "result": block, "trace": trace})

    def note(self, block: dict[str, Any], steer: int | None = None) -> None:
        """A text block added to the last user message (or as a user message of its own after a
        reply); ``steer``: the id of the steer message it is (:mod:`hermesd.delegation.inbox`)."""
        self.write({"t": "note", "block": block, **({"steer": steer} if steer is not None else {})})


def open_for(spec: Any, waiting: Callable[[str], None] = lambda what: None,
             pause: Callable[[float], bool] = lambda seconds: bool(time.sleep(seconds))) -> Journal | None:
    """The journal of the job ``spec`` (a :class:`hermesd.contract.wire.JobSpec`: its ``journal`` path and
    ``journal_wait_seconds``; ``waiting``, ``pause``: see :class:`Journal`), or None for a job that keeps none."""
    return Journal(spec.journal, spec.journal_wait_seconds, waiting, pause) if spec.journal else None


def whole_lines(fd: int) -> int:
    """The size in bytes of the file open at ``fd`` up to and with its last newline (0: none)."""
    end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - 65536)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def interrupted_result(call: dict[str, Any]) -> dict[str, Any]:
    """The ``tool_result`` of ``call`` when a restart interrupted it (:data:`INTERRUPTED`)."""
    return m.tool_result(call["id"], INTERRUPTED, is_error=True)


@dataclass
class Resumed:
    """The state of a run rebuilt from its journal (:func:`replay`).

    ``messages``: the conversation so far; ``turn``, ``api_calls``, ``tokens``:
    the counters of the last model call; ``trace``: one entry per tool result;
    ``open_calls``: the tool calls of the last assistant message without a result
    yet, in order; ``results``: the results already known of those (``id`` →
    block), interrupted ones included; ``interrupted``: their names; ``steered``: the ids of
    the steer messages in the conversation.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0
    api_calls: int = 0
    tokens: dict[str, int] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)
    open_calls: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    interrupted: list[str] = field(default_factory=list)
    steered: list[int] = field(default_factory=list)


def replay(path: str, repeatable: Callable[[str], bool],
           waiting: Callable[[dict[str, Any]], bool] = lambda call: False) -> Resumed | None:
    """The run recorded at ``path``, or None when it holds no message (a fresh start).

    ``repeatable(name)``: whether tool ``name`` may run again when it was
    interrupted; ``waiting(call)``: whether the interrupted ``call`` (a ``tool_use``
    block) never ran because it was waiting for a person (:func:`child.approval.waiting`):
    it runs again, and waits for the same answer.  Raises :class:`hermesd.journal.JournalError`.
    """
    state, started = Resumed(), set()

    def close_calls() -> None:  # the results of the last model call become its user message
        if state.open_calls:
            state.messages.append(m.user(*[state.results[c["id"]] for c in state.open_calls
                                           if c["id"] in state.results]))
            state.open_calls, state.results = [], {}
        started.clear()

    for entry in stored.read(path):
        kind = entry["t"]
        if kind == "message":
            close_calls()
            message = entry["message"]
            state.messages.append(message)
            state.turn, state.api_calls = int(entry.get("turn") or 0), int(entry.get("api_calls") or 0)
            state.tokens = dict(entry.get("tokens") or {})
            if message.get("role") == "assistant":
                state.open_calls = m.tool_uses(message)
        elif kind == "tool_started":
            started.add(entry.get("id"))
        elif kind == "tool_result":
            state.results[entry["result"]["tool_use_id"]] = entry["result"]
            state.trace.append(entry.get("trace") or {})
        elif kind == "note":
            close_calls()
            if state.messages and state.messages[-1]["role"] == "user":
                state.messages[-1]["content"].append(entry["block"])
            else:
                state.messages.append(m.user(entry["block"]))
            if entry.get("steer") is not None:
                state.steered.append(entry["steer"])
    for call in state.open_calls:
        if call["id"] in started and call["id"] not in state.results and not repeatable(call["name"]) \
                and not waiting(call):
            state.results[call["id"]] = interrupted_result(call)
            state.interrupted.append(call["name"])
            state.trace.append({"name": call["name"], "ok": False, "bytes": len(INTERRUPTED.encode())})
    if state.open_calls and all(c["id"] in state.results for c in state.open_calls):
        close_calls()
    return state if state.messages else None
