"""What a long run sends: old tool results shortened, so that a child with hundreds of tool
calls stays within its model's context window.

The run's messages stay whole (the trajectory, a session's stored messages and the journal keep
every tool result as it was); only the view sent to the model is shortened.  A tool result older
than the last :data:`KEEP_ROUNDS` rounds is cut to its first :data:`HEAD_BYTES` bytes behind a
marker that says so, once the conversation's estimated size passes :data:`SHARE` of the window.

The prompt cache wants a prefix that does not change from call to call (see
https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): so the point up to which
results are shortened (:attr:`Window.cut`) moves only when the estimate passes the limit again,
never a little every round — one cache miss per move, a byte-stable prefix between moves.
"""

from __future__ import annotations

import json
from typing import Any

from hermesd.contract.tokens import estimate_tokens

KEEP_ROUNDS = 3
"""Tool-result messages at the end of the conversation that are always sent whole."""

SHARE = 0.5
"""Share of the context window past which older tool results are shortened."""

HEAD_BYTES = 400
"""Bytes of a shortened tool result that are still sent."""

MARKER = ("[tool result shortened in what is sent to keep the conversation within the context window: "
          "{size} bytes, the first {head} shown]\n")


class Window:
    """The shortening state of one run.

    ``context_window``: the model's window in tokens (None or 0: nothing is shortened).
    :meth:`view` is called before each model call with the whole conversation.
    """

    def __init__(self, context_window: int | None, *, share: float = SHARE, keep_rounds: int = KEEP_ROUNDS):
        self.limit = int(context_window * share) if context_window else 0
        self.keep_rounds = keep_rounds
        self.cut = 0
        """Messages before this index have their long tool results shortened."""

    def view(self, messages: list[dict[str, Any]], fixed_tokens: int = 0) -> list[dict[str, Any]]:
        """``messages`` as they are to be sent (a new list; the messages are not changed).

        ``fixed_tokens``: the estimated tokens of what is sent besides the messages (system
        prompt, tool definitions).  The cut moves forward (to keep only the last
        ``keep_rounds`` tool-result messages whole) when the estimate passes the limit.
        """
        if not self.limit:
            return messages
        shown = shortened(messages, self.cut)
        if fixed_tokens + estimate_tokens(shown) <= self.limit:
            return shown
        results = [i for i, msg in enumerate(messages) if _has_results(msg)]
        if len(results) > self.keep_rounds:
            self.cut = max(self.cut, results[-self.keep_rounds])
        return shortened(messages, self.cut)


def shortened(messages: list[dict[str, Any]], cut: int) -> list[dict[str, Any]]:
    """``messages`` with each long tool result before index ``cut`` shortened (the same
    messages, always the same way: a byte-stable prefix)."""
    return [_shorten(msg) if i < cut and _has_results(msg) else msg for i, msg in enumerate(messages)]


def _has_results(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in message.get("content") or [])


def _shorten(message: dict[str, Any]) -> dict[str, Any]:
    blocks = []
    for block in message["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            body = block.get("content")
            text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
            raw = text.encode("utf-8")
            if len(raw) > 2 * HEAD_BYTES:
                head = raw[:HEAD_BYTES].decode("utf-8", "ignore")
                block = {**block, "content": MARKER.format(size=len(raw), head=HEAD_BYTES) + head}
        blocks.append(block)
    return {**message, "content": blocks}
