"""A fake Anthropic Messages API (``POST /v1/messages``) for tests and demos.

Speaks the real wire format (https://docs.anthropic.com/en/api/messages and
.../messages-streaming): a JSON ``message`` when the request does not stream;
with ``"stream": true`` the SSE sequence ``message_start``, ``ping``, per block
``content_block_start`` / ``content_block_delta`` (``text_delta``,
``thinking_delta`` + ``signature_delta``, ``input_json_delta``) /
``content_block_stop``, then ``message_delta`` (stop reason, usage) and
``message_stop``.  Errors are ``{"type": "error", "error": {"type", "message"}}``
with their status and ``retry-after-ms`` / ``retry-after`` headers; a stream can
also fail in the middle (``event: error``) or just stop.

Use::

    with FakeAnthropic() as api:
        api.reply_tool_use("terminal", {"command": "pwd"}).reply_text("done")
        ...  # point the SDK or a child at base_url=api.url
        assert api.requests[1].body["messages"][-1]["content"][0]["type"] == "tool_result"

With the queue empty the server answers ``Done: <the last user text>``.  Given
``cache=PromptCache(min_tokens=...)`` (:mod:`tests.fakes.cache`), a reply without
usage of its own reports the prompt cache's writes and reads as the API counts them.
``python tests/fakes/anthropic_server.py [--port N]`` serves that default for
manual runs.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__:
    from . import FakeServer, Out, Received, pieces
    from .cache import PromptCache
    from .limits import Limits, Refusal, Snapshot, anthropic_headers
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fakes import FakeServer, Out, Received, pieces
    from fakes.cache import PromptCache
    from fakes.limits import Limits, Refusal, Snapshot, anthropic_headers

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}
"""Anthropic error ``type`` per HTTP status."""

_ids = itertools.count(1)


DEFAULT_USAGE = {"input_tokens": 12, "output_tokens": 7}
"""The usage of a reply given none, on a server that counts no cache."""


@dataclass
class Message:
    """A successful reply: these ``content`` blocks (API shapes), ``stop_reason``
    and ``usage`` (default: counted by the server's prompt cache when it has one,
    :func:`usage_for`, else :data:`DEFAULT_USAGE`); ``event_delay`` seconds between
    streamed events."""

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"
    usage: dict[str, int] | None = None
    event_delay: float = 0.0

    def body(self, request: Received) -> dict[str, Any]:
        """The non-streaming response body."""
        return {"id": f"msg_fake_{next(_ids)}", "type": "message", "role": "assistant",
                "model": (request.body or {}).get("model", "fake"), "content": self.content,
                "stop_reason": self.stop_reason, "stop_sequence": None, "usage": self.usage_for(request)}

    def usage_for(self, request: Received) -> dict[str, int]:
        """This reply's usage: its own, else what the server's prompt cache counts for
        ``request`` (once: input tokens, cache writes and reads, 7 output tokens), else
        :data:`DEFAULT_USAGE`."""
        if self.usage:
            return self.usage
        if request.usage is None and request.cache is not None and isinstance(request.body, dict):
            request.usage = {**request.cache.anthropic(request.body), "output_tokens": 7}
        return request.usage or DEFAULT_USAGE

    def write(self, out: Out, request: Received) -> None:
        """Answer as JSON, or as an SSE stream when the request streams."""
        if not request.streaming:
            out.json(200, self.body(request), {"request-id": "req_fake"})
            return
        out.sse_start({"request-id": "req_fake"})
        self.stream(out, request, self.content)
        self.event(out, "message_delta", {"delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
                                          "usage": {"output_tokens": self.usage_for(request)["output_tokens"]}})
        self.event(out, "message_stop", {})

    def stream(self, out: Out, request: Received, blocks: list[dict[str, Any]]) -> None:
        """Send ``message_start`` and ``blocks`` as start/delta/stop events."""
        start = {**self.body(request), "content": [], "stop_reason": None,
                 "usage": {**self.usage_for(request), "output_tokens": 1}}
        self.event(out, "message_start", {"message": start})
        self.event(out, "ping", {})
        for index, block in enumerate(blocks):
            first, deltas = _split(block)
            self.event(out, "content_block_start", {"index": index, "content_block": first})
            for delta in deltas:
                self.event(out, "content_block_delta", {"index": index, "delta": delta})
            self.event(out, "content_block_stop", {"index": index})

    def event(self, out: Out, name: str, data: dict[str, Any]) -> None:
        """One SSE event ``name`` whose data carries ``"type": name``."""
        out.wait(self.event_delay)
        out.sse(name, {"type": name, **data})


def _split(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A content block as its ``content_block_start`` value and its deltas."""
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    if kind == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])]
        return {"type": "thinking", "thinking": ""}, deltas + [{"type": "signature_delta",
                                                                "signature": block["signature"]}]
    if kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        return start, [{"type": "input_json_delta", "partial_json": p} for p in pieces(json.dumps(block["input"]))]
    return block, []


@dataclass
class Error:
    """An HTTP error reply: ``status``, error ``type`` (default from the status),
    ``message`` and extra ``headers`` (e.g. ``retry-after-ms``)."""

    status: int
    message: str = "fake error"
    type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        """The API's error body."""
        return {"type": "error", "error": {"type": self.type or ERROR_TYPES.get(self.status, "api_error"),
                                           "message": self.message}}

    def write(self, out: Out, request: Received) -> None:
        """Send the error response (streaming or not, errors come before any event)."""
        out.json(self.status, self.body(), {"request-id": "req_fake", **self.headers})


@dataclass
class StreamFailure:
    """A stream that starts (``message_start`` and ``content``) then fails: an
    ``event: error`` of ``error_type``, or with ``error_type=None`` the connection
    just closes without ``message_stop``.  To a non-streaming request: HTTP 529."""

    content: list[dict[str, Any]] = field(default_factory=list)
    error_type: str | None = "overloaded_error"

    def write(self, out: Out, request: Received) -> None:
        """Start the stream, then break it."""
        if not request.streaming:
            Error(529, "Overloaded", type=self.error_type or "overloaded_error").write(out, request)
            return
        out.sse_start({"request-id": "req_fake"})
        Message(self.content).stream(out, request, self.content)
        if self.error_type:
            out.sse("error", {"type": "error", "error": {"type": self.error_type, "message": "Overloaded"}})


def text_block(text: str) -> dict[str, Any]:
    """A ``text`` content block."""
    return {"type": "text", "text": text}


def thinking_block(thinking: str, signature: str = "fake-signature") -> dict[str, Any]:
    """A ``thinking`` content block with its ``signature``."""
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def tool_use_block(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:  # noqa: A002
    """A ``tool_use`` content block (``id`` defaults to a fresh ``toolu_fake_N``)."""
    return {"type": "tool_use", "id": id or f"toolu_fake_{next(_ids)}", "name": name, "input": input}


def last_user_text(request: Received) -> str:
    """The text of the request's last user message (``""`` if none)."""
    for message in reversed((request.body or {}).get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    return ""


class FakeAnthropic(FakeServer):
    """The fake Messages API; see the module doc.

    Chainable helpers queue replies: :meth:`reply_text`, :meth:`reply_tool_use`,
    :meth:`reply_error`, :meth:`reply_stream_error`, :meth:`reply_truncated`; the
    generic :meth:`reply` takes :class:`Message`, :class:`Error`,
    :class:`StreamFailure` or callables ``request -> reply``.  ``limits``: a
    :class:`tests.fakes.limits.Limits` gate (rate limits with the
    ``anthropic-ratelimit-*`` headers, 529, the spend limit, the context window).
    """

    def __init__(self, *, delay: float = 0.0, port: int = 0, limits: Limits | None = None,
                 cache: PromptCache | None = None):
        super().__init__(delay=delay, port=port, limits=limits)
        self.cache = cache
        self.default = lambda request: Message([text_block(f"Done: {last_user_text(request)[:200]}")])

    def routes(self) -> tuple[str, ...]:
        return ("/v1/messages",)

    def refusal(self, refusal: Refusal, retry_headers: dict[str, str]) -> Error:
        """The API's error for ``refusal`` (its status and ``type``, the retry headers)."""
        return Error(refusal.status, refusal.message, type=refusal.type, headers=retry_headers)

    def limit_headers(self, snapshot: Snapshot) -> dict[str, str]:
        """``anthropic-ratelimit-*`` (:func:`tests.fakes.limits.anthropic_headers`)."""
        return anthropic_headers(snapshot)

    def output_tokens(self, reply: object) -> int:
        """``usage.output_tokens`` of a :class:`Message` (0 for errors)."""
        return int((reply.usage or DEFAULT_USAGE)["output_tokens"]) if isinstance(reply, Message) else 0

    def input_tokens(self, reply: object, request: Received) -> int | None:
        """``usage.input_tokens`` and ``cache_creation_input_tokens`` of a :class:`Message` (what
        Anthropic counts against an input-token limit; cache reads it does not count); None for an
        error, or when the prompt cache counts the usage (it is counted once, as it is answered:
        the limit then takes the whole prompt's text)."""
        if not isinstance(reply, Message) or (reply.usage is None and request.cache is not None):
            return None
        usage = reply.usage or DEFAULT_USAGE
        return int(usage.get("input_tokens", 0)) + int(usage.get("cache_creation_input_tokens", 0))

    def reply_text(self, text: str, *, thinking: str | None = None, signature: str = "fake-signature",
                   usage: dict[str, int] | None = None) -> FakeAnthropic:
        """Queue a final answer ``text`` (after a thinking block when ``thinking`` is given)."""
        blocks = ([thinking_block(thinking, signature)] if thinking is not None else []) + [text_block(text)]
        return self.reply(Message(blocks, usage=usage))

    def reply_tool_use(self, name: str, input: dict[str, Any], *, id: str | None = None,  # noqa: A002
                       text: str | None = None, thinking: str | None = None) -> FakeAnthropic:
        """Queue a reply calling tool ``name`` with ``input`` (optionally after thinking and text)."""
        blocks = [thinking_block(thinking)] if thinking is not None else []
        blocks += [text_block(text)] if text else []
        return self.reply(Message(blocks + [tool_use_block(name, input, id)], stop_reason="tool_use"))

    def reply_error(self, status: int, message: str = "fake error", *, type: str | None = None,  # noqa: A002
                    retry_after_ms: float | None = None, retry_after: float | None = None) -> FakeAnthropic:
        """Queue an HTTP error ``status`` with the optional retry headers."""
        headers = {}
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        return self.reply(Error(status, message, type=type, headers=headers))

    def reply_stream_error(self, error_type: str = "overloaded_error", *,
                           content: list[dict[str, Any]] | None = None) -> FakeAnthropic:
        """Queue a stream that sends ``content`` and then ``event: error`` of ``error_type``."""
        return self.reply(StreamFailure(content or [], error_type))

    def reply_truncated(self, content: list[dict[str, Any]] | None = None) -> FakeAnthropic:
        """Queue a stream that sends ``content`` and closes without ``message_stop``."""
        return self.reply(StreamFailure(content or [], None))


if __name__ == "__main__":
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Serve the fake Anthropic API (default answers only).")
    parser.add_argument("--port", type=int, default=0)
    server = FakeAnthropic(port=parser.parse_args().port)
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
