"""Prompt-cache accounting for the fake model servers, counted as the APIs do.

Anthropic (https://platform.claude.com/docs/en/build-with-claude/prompt-caching,
read 2026-12-01): a request is the blocks tools → system → messages in that
order; a ``cache_control`` block is a breakpoint, and the prefix up to and
including it is cached (when it is at least the model's minimum length) for
its lifetime, refreshed by each hit.  A breakpoint reads the longest prefix
cached before, looked up at the breakpoint and the 20 blocks before it; what
lies between that read and the last breakpoint is written; ``input_tokens``
counts only the rest.  The markers are not part of the prefix.

OpenAI (https://platform.openai.com/docs/guides/prompt-caching, read
2026-12-01): automatic; the longest prefix seen before (of at least 1,024
tokens) is read and reported as ``prompt_tokens_details.cached_tokens``,
which ``prompt_tokens`` includes.

Tokens are counted as one per four bytes of the block's JSON (at least one),
which is all a test needs: the same request always counts the same.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any, Callable

LOOKBACK = 20
"""Blocks before a breakpoint at which Anthropic looks for an earlier cache entry."""


def tokens_of(block: Any) -> int:
    """The fake's token count of one block: a quarter of its JSON's bytes, at least 1."""
    return max(1, len(json.dumps(block, sort_keys=True).encode()) // 4)


class PromptCache:
    """The cache entries of one fake server.

    ``min_tokens``: shortest prefix that is cached (Anthropic: 1,024 for
    Sonnet-class models; OpenAI: 1,024); ``ttl``: seconds an entry lives after
    its last write or hit (Anthropic's default 5 minutes); ``clock``: monotonic
    seconds (a test may pass its own).  Thread-safe.
    """

    def __init__(self, *, min_tokens: int = 1024, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.min_tokens, self.ttl, self.clock = min_tokens, ttl, clock
        self._entries: dict[str, float] = {}  # prefix digest -> expiry
        self._lock = threading.Lock()

    def anthropic(self, body: dict[str, Any]) -> dict[str, int]:
        """The ``usage`` input fields of a Messages API request ``body``:
        ``input_tokens`` (the uncached rest), ``cache_creation_input_tokens``,
        ``cache_read_input_tokens``."""
        blocks, marks = anthropic_blocks(body)
        read, written, total = self._account(str(body.get("model")), blocks, marks)
        return {"input_tokens": total - read - written, "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read}

    def openai(self, body: dict[str, Any]) -> dict[str, int]:
        """The ``usage`` input fields of a chat-completions request ``body``:
        ``prompt_tokens`` (all of them) and ``prompt_tokens_details.cached_tokens``."""
        blocks = [{"tools": body.get("tools") or []}, *(body.get("messages") or [])]
        read, _, total = self._account(str(body.get("model")), blocks, list(range(len(blocks))))
        return {"prompt_tokens": total, "prompt_tokens_details": {"cached_tokens": read}}

    def _account(self, model: str, blocks: list[Any], marks: list[int]) -> tuple[int, int, int]:
        """(read, written, total) tokens of a request of ``blocks`` with breakpoints at ``marks``."""
        sizes, digests, digest, running = [], [], hashlib.sha256(model.encode()), 0
        for block in blocks:
            digest.update(json.dumps(block, sort_keys=True).encode())
            running += tokens_of(block)
            sizes.append(running)
            digests.append(digest.copy().hexdigest())
        now = self.clock()
        with self._lock:
            self._entries = {k: v for k, v in self._entries.items() if v > now}
            read_at = -1
            for mark in marks:
                for at in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                    if digests[at] in self._entries:
                        read_at = max(read_at, at)
                        break
            if read_at >= 0:
                self._entries[digests[read_at]] = now + self.ttl
            cacheable = [m for m in marks if sizes[m] >= self.min_tokens]
            for mark in cacheable:
                self._entries[digests[mark]] = now + self.ttl
        read = sizes[read_at] if read_at >= 0 else 0
        last = max(cacheable, default=-1)
        written = sizes[last] - read if last > read_at else 0
        return read, written, running


def anthropic_blocks(body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """A Messages API request as its blocks in prefix order (tools, system, each
    message's content blocks, ``cache_control`` taken out) and the indexes of the
    breakpoints among them."""
    blocks: list[Any] = []
    marks: list[int] = []

    def add(block: Any, role: str | None = None) -> None:
        if isinstance(block, dict) and "cache_control" in block:
            marks.append(len(blocks))
            block = {k: v for k, v in block.items() if k != "cache_control"}
        blocks.append({"role": role, **block} if role else block)

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        add(block, "system")
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            add(block, message.get("role"))
    return blocks, marks
