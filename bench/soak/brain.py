"""The soak's model: the fake Messages API of ``tests/fakes`` answering by the tag in each prompt.

Every piece of work the soak submits carries a tag ``<<soak KIND ID TURNS>>`` in its goal, prompt,
message or Kanban task.  The brain finds the last user message holding a tag and counts the tool
results after it, so a conversation's reply depends only on the conversation (a resumed child that
asks again gets the same answer):

* ``d`` (a delegation), ``e`` (a session's ``/background`` errand), ``g`` (a job with a budget):
  ``TURNS`` terminal commands ``echo 'ID N' >> EFFECTS`` (the effect counter), then the answer;
* ``a`` (a job waiting on an approval): one ``write_file`` call (held: ``approvals.always``), then the answer;
* ``k`` (a Kanban worker): ``kanban_complete``, then the answer;
* ``s`` (a session's turn), ``b`` (a batch prompt): the answer at once.

A conversation without a tag (the turn delivering a background result to its session) gets ``noted``.
Faults of the provider: :meth:`Brain.fail` makes every request answer 429, 500 or 529 for a while,
or break the stream in the middle (the connection closes after ``message_start``).  The brain's own
count of what it answered in full — calls per tag and the tokens of their usage — is what the
oracle compares with the daemon's bill and with the ideal number of calls.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import (DEFAULT_USAGE, Error, FakeAnthropic, Message, StreamFailure, text_block,
                                          tool_use_block)

TAG = re.compile(r"<<soak (\w) (\S+) (\d+)>>")
NOTIFICATION = "[Async delegation "
"""How a background job's completion delivered into its session begins (``hermesd.delegation.delivery``): it
quotes the job's goal, tag included, but asks for no work."""
FAULTS = ("429", "500", "529", "drop")
"""The provider's faults: an HTTP status for every request, or ``drop`` (the stream breaks)."""


def tag(kind: str, ident: str, turns: int = 0) -> str:
    """The tag of one piece of work (see the module doc)."""
    return f"<<soak {kind} {ident} {turns}>>"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def _has_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


class Counted(Message):
    """A reply that tells the brain once it was written in full (so it is paid for)."""

    def __init__(self, brain: Brain, key: str | None, content: list[dict[str, Any]], stop_reason: str = "end_turn"):
        super().__init__(content, stop_reason)
        self._brain, self._key = brain, key

    def write(self, out: Any, request: Any) -> None:
        """Write the reply, then count it (a reply cut off by the client is not counted)."""
        super().write(out, request)
        self._brain.paid(self._key, self.usage_for(request))


class Brain:
    """The callable ``default`` of a :class:`FakeAnthropic`; see the module doc.

    ``effects``: the file the commands append to; ``calls``: replies written in full per tag id
    (``None``: untagged); ``tokens``: ``{"input", "output"}`` of those replies; ``refused``: the
    requests answered with a fault, by fault.
    """

    def __init__(self, effects: Path):
        self.effects = effects
        self.calls: Counter = Counter()
        self.tokens = Counter()
        self.refused: Counter = Counter()
        self._fault: tuple[str, float] = ("", 0.0)
        self._lock = threading.Lock()

    def fail(self, fault: str, seconds: float) -> None:
        """Answer every request with ``fault`` (:data:`FAULTS`) for ``seconds``."""
        with self._lock:
            self._fault = (fault, time.monotonic() + seconds)

    def paid(self, key: str | None, usage: dict[str, int]) -> None:
        """Count one reply written in full."""
        with self._lock:
            self.calls[key] += 1
            self.tokens["input"] += usage.get("input_tokens", 0)
            self.tokens["output"] += usage.get("output_tokens", 0)

    def __call__(self, request: Any) -> Any:
        with self._lock:
            fault, until = self._fault
            if fault and time.monotonic() < until:
                self.refused[fault] += 1
                return _fault_reply(fault)
        messages = (request.body or {}).get("messages") or []
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            text = _text(message.get("content", "")) if message.get("role") == "user" else ""
            if text.lstrip().startswith(NOTIFICATION):
                break  # a delivery turn: its own work is none
            found = TAG.findall(text)
            if found:
                kind, ident, turns = found[0]
                done = sum(1 for m in messages[index + 1:] if m.get("role") == "user" and _has_result(m))
                return Counted(self, ident, *self._reply(kind, ident, int(turns), done))
        return Counted(self, None, [text_block("noted")])

    def _reply(self, kind: str, ident: str, turns: int, done: int) -> tuple[list[dict[str, Any]], str]:
        if kind in "deg" and done < turns:
            return [tool_use_block("terminal", {"command": f"echo '{ident} {done}' >> {self.effects}"})], "tool_use"
        if kind == "a" and done < 1:
            return [tool_use_block("write_file", {"path": f"approved-{ident}.txt", "content": ident})], "tool_use"
        if kind == "k" and done < 1:
            return [tool_use_block("kanban_complete", {"result": f"result of {ident}"})], "tool_use"
        return [text_block(f"finished {ident}")], "end_turn"


def _fault_reply(fault: str) -> Any:
    if fault == "drop":
        return StreamFailure([text_block("half an answer")], error_type=None)
    status = int(fault)
    return Error(status, "soak fault", headers={"retry-after": "1"} if status == 429 else {})


def serve(effects: Path) -> tuple[FakeAnthropic, Brain]:
    """A running fake Messages API answered by a new :class:`Brain` (close the server when done)."""
    brain = Brain(effects)
    api = FakeAnthropic()
    api.default = brain
    return api, brain


__all__ = ["Brain", "DEFAULT_USAGE", "FAULTS", "TAG", "serve", "tag"]
