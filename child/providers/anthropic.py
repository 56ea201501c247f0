"""The ``anthropic`` provider: the Messages API through the official ``anthropic`` SDK.

Reaches Anthropic and every Anthropic-compatible server (vLLM, Ollama,
llama.cpp's server) through ``base_url`` (or ``ANTHROPIC_BASE_URL``).  Requests
stream (``client.messages.stream``), so long generations do not hit read
timeouts and streamed tool input is assembled by the SDK.

Errors: the SDK retries 408/409/429/5xx/529 and connection errors ``max_retries``
times (honouring ``retry-after-ms`` / ``retry-after``) and never 400/401/403/404.  A
child's provider is made with ``max_retries=0`` (:mod:`child.providers.select`): the
governor (:mod:`child.governor`) decides when a 429/529 is tried again, for the whole
fleet, and the agent loop retries the other transient failures.  What fails becomes a
:class:`ProviderError` whose ``kind`` says what it was (``base.kind_of``) and which
carries the response's limit headers and ``retry-after``.  The SDK does not retry a
stream that breaks or reports an ``error`` event (e.g. ``overloaded_error``) after it
started: that becomes a ``ProviderError(retryable=True)`` (``kind`` ``overloaded`` for
an overload).  ``last_headers``: the limit headers of the latest response.

The prompt cache (https://platform.claude.com/docs/en/build-with-claude/prompt-caching,
read 2026-12-01): every request marks its stable prefix with ``cache_control``
breakpoints (:func:`mark_cache`), so the next call of the same run or session,
whose prefix is byte-identical, reads it from the cache instead of paying the
full input price; the usage's ``cache_creation_input_tokens`` and
``cache_read_input_tokens`` are recorded (:func:`usage_of`).

``import anthropic`` costs about a second, so it happens on the first call.
"""

from __future__ import annotations

import os
from typing import Any

from child.governor import limit_headers
from child.providers.base import Completion, ProviderError, key_id, kind_of, status_error, tls_context, touch

DEFAULT_URL = "https://api.anthropic.com"
"""Where the SDK sends requests without a ``base_url`` (the governor's endpoint name for it)."""

DEFAULT_MODEL = "claude-sonnet-4-6"

THINKING_BUDGETS = {"none": 0, "minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32000}
"""Extended-thinking ``budget_tokens`` per ``reasoning_effort`` (1024 is the API's minimum)."""

NO_KEY = "hermesd-no-key"
"""Placeholder key for a ``base_url`` server that needs none (the SDK refuses to send without one)."""

RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
"""Error types of an ``event: error`` mid-stream for which a fresh attempt may succeed."""

_HINTS = {
    401: " (check ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN)",
    403: " (the key may not have access to this model)",
    404: " (check the model name and base_url)",
}


TRACING = ("opentelemetry.propagate", "opentelemetry.trace.propagation.tracecontext",
           "opentelemetry.baggage.propagation")
"""What the SDK imports on its first request (its tracing's propagators, when installed)."""


def warm_template() -> int:
    """In the warm template (:mod:`child.zygote`): what every child's first call would otherwise
    do itself — build a client (importing its HTTP transport: httpcore, h11, anyio's streams),
    import what a request imports, build the SDK's models of a streamed reply and run (and let the
    interpreter specialise) the code of a whole call — done once against a loopback server
    (:func:`child.loopback.warm_calls`), so forked children share it instead of each making it
    private (``bench/bench_fleet.py``).  Nothing leaves the host.  Returns the calls answered."""
    import importlib

    import anthropic  # noqa: F401 - before the loopback server waits for the first call
    from child import loopback

    for name in TRACING:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    return loopback.warm_calls(lambda url, timeout: AnthropicProvider(base_url=url, api_key=NO_KEY, max_retries=0,
                                                                      timeout=timeout, trust_env=False),
                               loopback.response(loopback.sse(WARM_STREAM), "text/event-stream"))


WARM_STREAM = [
    {"type": "message_start", "message": {"id": "msg_warm", "type": "message", "role": "assistant",
                                          "model": DEFAULT_MODEL, "content": [], "stop_reason": None,
                                          "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "warm"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1,
     "content_block": {"type": "tool_use", "id": "toolu_warm", "name": "terminal", "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"command"'}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ': "true"}'}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]
"""The streamed reply of :func:`warm_template`'s calls (the Messages API's event sequence: text, then a tool call)."""


class AnthropicProvider:
    """Claude (or an Anthropic-compatible server) behind :meth:`complete`.

    ``model``: model name (an OpenRouter-style ``anthropic/`` prefix is dropped);
    ``base_url``: server URL (default ``ANTHROPIC_BASE_URL``, else Anthropic's);
    ``api_key``: default ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_AUTH_TOKEN`` (both sent
    as ``Authorization: Bearer``); ``max_retries``: SDK retries per call;
    ``timeout``: seconds per HTTP request; ``temperature``: sent only when set
    and thinking is off; ``trust_env``: the HTTP transport reads proxies from the
    environment (httpx's ``trust_env``; the warm template's loopback calls go through
    none, so nothing of them leaves the host).  Raises :class:`ProviderError` when
    there is neither a key nor a ``base_url``.
    """

    name = "anthropic"
    synthetic = False

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_retries: int = 4, timeout: float = 600.0, temperature: float | None = None,
                 trust_env: bool = True):
        self.model = (model or DEFAULT_MODEL).removeprefix("anthropic/")
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        env_key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if api_key:
            self._auth = {"api_key": api_key}
        elif env_key:
            self._auth = {}  # the SDK reads the environment itself
        elif self.base_url:
            self._auth = {"api_key": NO_KEY}
        else:
            raise ProviderError("no Anthropic credentials: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN), "
                                "or set base_url to an Anthropic-compatible server")
        self.endpoint = (self.base_url or DEFAULT_URL).rstrip("/")
        self.key_id = key_id(api_key or env_key)
        self.last_headers: dict[str, str] = {}
        self.max_retries, self.timeout, self.temperature = max_retries, timeout, temperature
        self.trust_env = trust_env
        self._client: Any = None

    def connect(self) -> None:
        """Import the SDK and build its client now (about a second the first time): a child does so
        before it asks the governor for its first call, so a granted call is sent at once
        (:mod:`child.governor`)."""
        self._sdk()

    def _sdk(self) -> Any:
        if self._client is None:
            import anthropic

            self._client = anthropic.Anthropic(base_url=self.base_url, max_retries=self.max_retries,
                                               timeout=self.timeout, **self._auth,
                                               http_client=anthropic.DefaultHttpxClient(verify=tls_context(),
                                                                                        trust_env=self.trust_env))
        return self._client

    def request(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                max_tokens: int, reasoning_effort: str | None) -> dict[str, Any]:
        """The keyword arguments of ``client.messages.stream`` for one call.

        Raises :class:`ProviderError` for an unknown ``reasoning_effort``.
        """
        effort = reasoning_effort or "none"
        if effort not in THINKING_BUDGETS:
            raise ProviderError(f"unknown reasoning_effort {effort!r}: use one of {', '.join(THINKING_BUDGETS)}")
        budget = THINKING_BUDGETS[effort]
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens + budget,
                                  "messages": wire_messages(messages)}
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = tools
        mark_cache(kwargs)
        if budget:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        elif self.temperature is not None:
            kwargs["extra_body"] = {"temperature": self.temperature}  # the SDK has no temperature argument
        return kwargs

    def complete(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 *, max_tokens: int = 4096, reasoning_effort: str | None = None) -> Completion:
        """One streamed Messages API call; see :class:`child.providers.base.Provider`.

        ``reasoning_effort`` (none/minimal/low/medium/high/xhigh) turns on extended
        thinking with a budget from :data:`THINKING_BUDGETS`, added to ``max_tokens``.
        """
        import anthropic
        import httpx2

        kwargs = self.request(system, messages, tools, max_tokens, reasoning_effort)
        self.last_headers = {}
        try:
            with self._sdk().messages.stream(**kwargs) as stream:
                self.last_headers = limit_headers(stream.response.headers)
                try:
                    finished = False
                    for event in stream:  # each streamed event is activity (child.activity)
                        touch(self, "streaming the model's reply")
                        finished = finished or event.type == "message_stop"
                except anthropic.APIStatusError as exc:
                    kind = kind_of(None, exc.type, str(exc.message))
                    raise ProviderError(f"stream error from the model server: {_describe(exc)}",
                                        retryable=exc.type in RETRYABLE_STREAM_ERRORS,
                                        kind=kind, headers=self.last_headers) from None
                except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
                    raise ProviderError(f"stream broke off: {exc.__class__.__name__}: {exc}",
                                        retryable=True) from None
                if not finished:
                    raise ProviderError("stream ended before message_stop", retryable=True)
                return to_completion(stream.current_message_snapshot)
        except anthropic.APIStatusError as exc:
            raise status_error(f"Anthropic API error {exc.status_code}: {_describe(exc)}"
                               f"{_HINTS.get(exc.status_code, '')}", exc, sdk_retried=self.max_retries > 0) from None
        except anthropic.APIConnectionError as exc:
            raise ProviderError(f"cannot reach {self.base_url or 'the Anthropic API'}: {exc}",
                                retryable=self.max_retries == 0) from None


def wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the API takes them: thinking blocks without a signature
    (written by another provider) are dropped, everything else is sent unchanged."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [b for b in content if not (b.get("type") == "thinking" and not b.get("signature"))]
        out.append({"role": message["role"], "content": content})
    return out


def to_completion(message: Any) -> Completion:
    """An SDK ``Message`` as a :class:`Completion` of internal blocks.

    Text, thinking and tool_use blocks keep only their API fields; other block
    types (e.g. ``redacted_thinking``) are kept as the API sent them.
    """
    blocks = []
    for block in message.content:
        if block.type == "text":
            blocks.append({"type": "text", "text": block.text})
        elif block.type == "thinking":
            blocks.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        elif block.type == "tool_use":
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input or {})})
        else:
            blocks.append(block.model_dump(mode="json", exclude_none=True))
    return Completion(blocks, stop_reason=message.stop_reason or "end_turn", usage=usage_of(message.usage))


def usage_of(usage: Any) -> dict[str, int]:
    """An SDK ``Usage`` as the tokens of a :class:`Completion`: ``input`` is every
    prompt token (the API's ``input_tokens``, the uncached rest, plus the cache's
    writes and reads), ``cache_write`` and ``cache_read`` how many of them were
    written to and read from the cache."""
    write, read = usage.cache_creation_input_tokens or 0, usage.cache_read_input_tokens or 0
    return {"input": usage.input_tokens + write + read, "output": usage.output_tokens,
            "cache_write": write, "cache_read": read}


EPHEMERAL = {"type": "ephemeral"}
"""The cache marker of a breakpoint (the default five-minute lifetime, refreshed by each hit)."""

MAX_BREAKPOINTS = 4
"""The API's limit of ``cache_control`` blocks in one request."""


def mark_cache(kwargs: dict[str, Any]) -> None:
    """Mark the stable prefix of a request (``client.messages.stream``'s keyword
    arguments, changed in place, the caller's lists and blocks left as they were).

    Breakpoints, in the API's prefix order tools → system → messages: the last
    tool, the system prompt, and two that slide with the conversation: the last
    message and the user message before it (where the previous call's last
    breakpoint was, so the call reads what that one wrote even when more than the
    API's lookback of 20 blocks came since).  Never more than
    :data:`MAX_BREAKPOINTS`.  A prefix shorter than the model's minimum is simply
    not cached (no error); the markers are not part of the prefix, so moving them
    keeps it byte-identical.  Source: the prompt-caching guide (module doc).
    """
    if kwargs.get("tools"):
        kwargs["tools"] = [*kwargs["tools"][:-1], {**kwargs["tools"][-1], "cache_control": EPHEMERAL}]
    if kwargs.get("system"):
        kwargs["system"] = [{"type": "text", "text": kwargs["system"], "cache_control": EPHEMERAL}]
    room = MAX_BREAKPOINTS - bool(kwargs.get("tools")) - bool(kwargs.get("system"))
    messages = kwargs["messages"]
    marked = 0
    for index in range(len(messages) - 1, -1, -1):
        if marked == room:
            break
        if marked and messages[index]["role"] != "user":
            continue  # the fallback sits where the previous call's last breakpoint was
        message = _marked(messages[index])
        if message is not None:
            messages[index] = message
            marked += 1


def _marked(message: dict[str, Any]) -> dict[str, Any] | None:
    """``message`` with ``cache_control`` on its last block (a copy), or ``None`` when that
    block cannot carry one (thinking blocks cannot) or there is none."""
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}] if content else []
    if not content or content[-1].get("type") in ("thinking", "redacted_thinking"):
        return None
    return {**message, "content": [*content[:-1], {**content[-1], "cache_control": EPHEMERAL}]}


def _describe(exc: Any) -> str:
    """``type: message`` of an SDK status error (from the error body; never the key)."""
    return f"{exc.type or 'error'}: {exc.api_message or exc.message}"
