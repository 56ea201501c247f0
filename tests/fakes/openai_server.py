"""A fake OpenAI-style chat-completions API (``POST .../chat/completions``) for tests.

Answers non-streaming requests in the real shape
(https://platform.openai.com/docs/api-reference/chat/object): one choice with
``message`` (``content``, ``tool_calls`` with JSON-string ``arguments``, and
``reasoning_content`` as DeepSeek and vLLM send it), ``finish_reason`` and
``usage`` (with ``prompt_tokens_details.cached_tokens`` when a ``cache`` counts it:
:mod:`tests.fakes.cache`); errors as ``{"error": {"message", "type", "code"}}`` with their status.

Use::

    with FakeOpenAI() as api:
        api.reply_tool_call("terminal", {"command": "pwd"}).reply_text("done")
        provider = OpenAICompatProvider("fake-model", base_url=api.url + "/v1")

With the queue empty the server answers ``Done.``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from . import FakeServer, Out, Received
from .cache import PromptCache
from .limits import Limits, Refusal, Snapshot, openai_headers

_ids = itertools.count(1)

DEFAULT_USAGE = {"prompt_tokens": 11, "completion_tokens": 5}
"""The usage of a reply given none, on a server that counts no cache."""


@dataclass
class ChatReply:
    """A successful completion: ``content``, ``tool_calls`` (``{"name", "arguments"
    (dict or raw string), "id"?}``), ``reasoning_content``, ``finish_reason``
    (default ``tool_calls`` when there are calls, else ``stop``) and ``usage``."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning_content: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    def write(self, out: Out, request: Received) -> None:
        """Send the ``chat.completion`` object."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [_call(c) for c in self.tool_calls]
        usage = self.usage_for(request)
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        out.json(200, {"id": f"chatcmpl-fake-{next(_ids)}", "object": "chat.completion", "created": 0,
                       "model": (request.body or {}).get("model", "fake"),
                       "choices": [{"index": 0, "message": message, "logprobs": None,
                                    "finish_reason": self.finish_reason or ("tool_calls" if self.tool_calls
                                                                            else "stop")}],
                       "usage": usage})


    def usage_for(self, request: Received) -> dict[str, Any]:
        """This reply's usage: its own, else what the server's prompt cache counts for
        ``request`` (with 5 completion tokens), else 11 prompt and 5 completion tokens."""
        if self.usage:
            return self.usage
        if request.cache is not None and isinstance(request.body, dict):
            return {**request.cache.openai(request.body), "completion_tokens": 5}
        return DEFAULT_USAGE


def _call(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["arguments"]
    return {"id": call.get("id") or f"call_fake_{next(_ids)}", "type": "function",
            "function": {"name": call["name"],
                         "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}


@dataclass
class ChatError:
    """An HTTP error ``status`` with ``message``, error ``type`` and extra ``headers``."""

    status: int
    message: str = "fake error"
    type: str = "server_error"
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None

    def write(self, out: Out, request: Received) -> None:
        """Send the error response."""
        out.json(self.status, {"error": {"message": self.message, "type": self.type, "code": self.code}},
                 self.headers)


OPENAI_REFUSALS = {
    "rate_limit": (429, "requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    "overloaded": (503, "server_error", None, "The server is overloaded or not ready yet."),
    "quota": (429, "insufficient_quota", "insufficient_quota",
              "You exceeded your current quota, please check your plan and billing details."),
    "context": (400, "invalid_request_error", "context_length_exceeded", None),
}
"""How OpenAI says each refusal of the gate: status, error ``type``, ``code``, message
(https://platform.openai.com/docs/guides/error-codes#api-errors); None keeps the gate's message."""


class FakeOpenAI(FakeServer):
    """The fake chat-completions API; see the module doc.  Its base URL for the
    SDK is ``url + "/v1"``; ``limits``: a :class:`tests.fakes.limits.Limits` gate
    (``x-ratelimit-*`` headers, 429, 503, ``insufficient_quota``, the context window)."""

    def __init__(self, *, delay: float = 0.0, port: int = 0, limits: Limits | None = None,
                 cache: PromptCache | None = None):
        super().__init__(delay=delay, port=port, limits=limits)
        self.cache = cache
        self.default = ChatReply("Done.")

    def routes(self) -> tuple[str, ...]:
        return ("/chat/completions",)

    def refusal(self, refusal: Refusal, retry_headers: dict[str, str]) -> ChatError:
        """OpenAI's error for ``refusal`` (:data:`OPENAI_REFUSALS`), with the retry headers."""
        status, type_, code, message = OPENAI_REFUSALS[refusal.reason]
        return ChatError(status, message or refusal.message, type_, retry_headers, code)

    def limit_headers(self, snapshot: Snapshot) -> dict[str, str]:
        """``x-ratelimit-*`` (:func:`tests.fakes.limits.openai_headers`)."""
        return openai_headers(snapshot)

    def output_tokens(self, reply: object) -> int:
        """``usage.completion_tokens`` of a :class:`ChatReply` (0 for errors)."""
        return int((reply.usage or DEFAULT_USAGE)["completion_tokens"]) if isinstance(reply, ChatReply) else 0

    def input_tokens(self, reply: object, request: Received) -> int | None:
        """``usage.prompt_tokens`` of a :class:`ChatReply`; None for an error, or when the prompt
        cache counts the usage (the limit then takes the whole prompt's text)."""
        if not isinstance(reply, ChatReply) or (reply.usage is None and request.cache is not None):
            return None
        return int((reply.usage or DEFAULT_USAGE)["prompt_tokens"])

    def reply_text(self, text: str, *, reasoning: str | None = None) -> FakeOpenAI:
        """Queue a final answer ``text`` (with ``reasoning_content`` when given)."""
        return self.reply(ChatReply(text, reasoning_content=reasoning))

    def reply_tool_call(self, name: str, arguments: dict[str, Any] | str, *, id: str | None = None,  # noqa: A002
                        content: str | None = None) -> FakeOpenAI:
        """Queue a reply calling ``name``; a string ``arguments`` is sent as is (even if not JSON)."""
        return self.reply(ChatReply(content, [{"name": name, "arguments": arguments, "id": id}]))

    def reply_error(self, status: int, message: str = "fake error", *,
                    headers: dict[str, str] | None = None) -> FakeOpenAI:
        """Queue an HTTP error ``status``."""
        return self.reply(ChatError(status, message, headers=headers or {}))
