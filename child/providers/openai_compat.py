"""The ``openai-compat`` provider: chat completions through the official ``openai`` SDK.

For OpenRouter and every other OpenAI-style server (vLLM, LM Studio, Ollama's
``/v1``...).  The internal Anthropic-style messages are translated both ways
(format: https://platform.openai.com/docs/api-reference/chat/create):

* tools → ``{"type": "function", "function": {"name", "description", "parameters"}}``
* assistant tool_use blocks ↔ ``tool_calls`` with JSON-string ``arguments``;
  arguments that are not a JSON object become ``{INVALID_JSON: raw}`` (see
  :mod:`child.messages`) so the loop answers with a tool error, never a crash
* tool_result blocks → ``{"role": "tool", "tool_call_id", "content"}`` messages
* ``reasoning_content`` (DeepSeek, vLLM) or ``reasoning`` (OpenRouter) in a
  reply → a thinking block with an empty signature; thinking is not sent back

Keys: ``api_key``, else ``OPENROUTER_API_KEY`` for an openrouter.ai URL, else
``OPENAI_API_KEY``, else ``OPENROUTER_API_KEY`` (and then OpenRouter's URL when
no ``base_url`` is given).  A ``base_url`` server that needs no key gets a
placeholder.  The SDK retries 408/409/429/5xx ``max_retries`` times; a child's
provider has none (the governor paces 429/503 for the fleet, the loop retries
the rest: see :mod:`child.providers.anthropic`).  What fails is a
:class:`ProviderError` with its ``kind``, limit headers and ``retry-after``; a 429
of ``insufficient_quota`` is ``quota`` and not retried.  Requests do not stream;
``last_headers`` holds the limit headers (``x-ratelimit-*``) of the latest response.

The prompt cache is automatic on OpenAI's side for prompts of 1,024 tokens or
more, on the longest prefix seen before
(https://platform.openai.com/docs/guides/prompt-caching, read 2026-12-01): the
request keeps a stable prefix (system prompt, then the conversation in order,
tools in the same order every call) and the reply's
``usage.prompt_tokens_details.cached_tokens`` is recorded as ``cache_read``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from child import messages as m
from child.governor import limit_headers
from child.providers.base import Completion, ProviderError, key_id, status_error, tls_context

OPENROUTER_URL = "https://openrouter.ai/api/v1"
OPENAI_URL = "https://api.openai.com/v1"
"""Where the SDK sends requests without a ``base_url`` (the governor's endpoint name for it)."""
NO_KEY = "hermesd-no-key"


def warm_template() -> int:
    """In the warm template (:mod:`child.zygote`): build a client, and run (and let the
    interpreter specialise) a whole call against a loopback server, so forked children share
    what every child's first call would otherwise make private; nothing leaves the host
    (:func:`child.providers.anthropic.warm_template`).  Returns the calls answered."""
    import openai  # noqa: F401 - before the loopback server waits for the first call
    from child import loopback

    return loopback.warm_calls(lambda url, timeout: OpenAICompatProvider("warm", base_url=url, api_key=NO_KEY,
                                                                         max_retries=0, timeout=timeout,
                                                                         trust_env=False),
                               loopback.response(json.dumps(WARM_REPLY).encode(), "application/json"), "/v1")


WARM_REPLY = {"id": "chatcmpl-warm", "object": "chat.completion", "created": 0, "model": "warm",
              "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                  "role": "assistant", "content": "warm", "tool_calls": [{
                      "id": "call_warm", "type": "function",
                      "function": {"name": "terminal", "arguments": '{"command": "true"}'}}]}}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
                        "prompt_tokens_details": {"cached_tokens": 0}}}
"""The reply of :func:`warm_template`'s calls (a chat completion with text and a tool call)."""


STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
                "length": "max_tokens", "content_filter": "refusal"}
"""OpenAI ``finish_reason`` → internal ``stop_reason``."""


class OpenAICompatProvider:
    """A model behind an OpenAI-style ``/chat/completions`` endpoint.

    ``model``: required (e.g. ``anthropic/claude-sonnet-4.6`` on OpenRouter);
    ``base_url``: default ``OPENAI_BASE_URL``, else OpenAI's (OpenRouter's when
    only ``OPENROUTER_API_KEY`` is set); ``max_retries``: SDK retries per call;
    ``timeout``: seconds per request; ``temperature``: sent only when set;
    ``trust_env``: as :class:`child.providers.anthropic.AnthropicProvider`'s.
    Raises :class:`ProviderError` when the model or every credential is missing.
    """

    name = "openai-compat"
    synthetic = False

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_retries: int = 4, timeout: float = 600.0, temperature: float | None = None,
                 trust_env: bool = True):
        if not model:
            raise ProviderError("the openai-compat provider needs a model name (config key `model`, or --model)")
        self.model = model
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        openrouter = os.environ.get("OPENROUTER_API_KEY")
        if base_url and "openrouter.ai" in base_url:
            api_key = api_key or openrouter
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key and openrouter:
            api_key, base_url = openrouter, base_url or OPENROUTER_URL
        if not api_key and not base_url:
            raise ProviderError("no key for the openai-compat provider: set OPENAI_API_KEY or "
                                "OPENROUTER_API_KEY, or set base_url to a server that needs none")
        self.base_url, self._api_key = base_url, api_key or NO_KEY
        self.endpoint = (base_url or OPENAI_URL).rstrip("/")
        self.key_id = key_id(api_key)
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
            import openai

            self._client = openai.OpenAI(api_key=self._api_key, base_url=self.base_url,
                                         max_retries=self.max_retries, timeout=self.timeout,
                                         http_client=openai.DefaultHttpxClient(verify=tls_context(),
                                                                               trust_env=self.trust_env))
        return self._client

    def request(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                max_tokens: int, reasoning_effort: str | None) -> dict[str, Any]:
        """The keyword arguments of ``client.chat.completions.create`` for one call."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": to_chat(system, messages)}
        kwargs["max_completion_tokens" if self.base_url is None else "max_tokens"] = max_tokens
        if tools:
            kwargs["tools"] = [{"type": "function", "function": {
                "name": t["name"], "description": t.get("description", ""), "parameters": t["input_schema"]}}
                for t in tools]
        if reasoning_effort:
            kwargs["reasoning_effort"] = reasoning_effort
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        return kwargs

    def complete(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 *, max_tokens: int = 4096, reasoning_effort: str | None = None) -> Completion:
        """One chat-completions call; see :class:`child.providers.base.Provider`."""
        import openai

        kwargs = self.request(system, messages, tools, max_tokens, reasoning_effort)
        self.last_headers = {}
        try:
            raw = self._sdk().chat.completions.with_raw_response.create(**kwargs)
            self.last_headers = limit_headers(raw.headers)
            response = raw.parse()
        except openai.APIStatusError as exc:
            raise status_error(f"chat completions error {exc.status_code}: {exc.message}", exc,
                               sdk_retried=self.max_retries > 0) from None
        except openai.APIConnectionError as exc:
            raise ProviderError(f"cannot reach {self.base_url or 'the OpenAI API'}: {exc}",
                                retryable=self.max_retries == 0) from None
        if not response.choices:
            raise ProviderError("the server answered without any choice", retryable=True)
        return from_chat(response)


def to_chat(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Internal messages (with ``system`` first) as chat-completions messages."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message["role"] == "assistant":
            chat.append(_assistant(message))
            continue
        for block in m.blocks_of(message, "tool_result"):
            chat.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": block["content"]})
        words = m.final_text(message)
        if words:
            chat.append({"role": "user", "content": words})
    return chat


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": m.final_text(message) or None}
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": _arguments(b["input"])}}
             for b in m.tool_uses(message)]
    if calls:
        out["tool_calls"] = calls
    return out


def _arguments(value: dict[str, Any]) -> str:
    return value[m.INVALID_JSON] if m.INVALID_JSON in value else json.dumps(value)


def _parse_arguments(raw: str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {m.INVALID_JSON: raw}
    return value if isinstance(value, dict) else {m.INVALID_JSON: raw}


def from_chat(response: Any) -> Completion:
    """The first choice of an SDK ``ChatCompletion`` as a :class:`Completion`."""
    choice = response.choices[0]
    message = choice.message
    blocks = []
    reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
    if isinstance(reasoning, str) and reasoning:
        blocks.append(m.thinking(reasoning))
    if message.content:
        blocks.append(m.text(message.content))
    for call in message.tool_calls or []:
        blocks.append(m.tool_use(call.function.name, _parse_arguments(call.function.arguments), id=call.id or None))
    tokens = usage_of(response.usage)
    stop = STOP_REASONS.get(choice.finish_reason or "stop", choice.finish_reason)
    if message.tool_calls:
        stop = "tool_use"
    return Completion(blocks, stop_reason=stop, usage=tokens)


def usage_of(usage: Any) -> dict[str, int]:
    """An SDK ``CompletionUsage`` (or ``None``) as the tokens of a :class:`Completion`:
    ``input`` is every prompt token (``prompt_tokens``), ``cache_read`` how many of them
    were read from the cache (``prompt_tokens_details.cached_tokens``), so the
    uncached rest is ``input - cache_read``; OpenAI reports no cache writes
    (``cache_write`` 0; writing costs nothing extra there)."""
    details = getattr(usage, "prompt_tokens_details", None)
    return {"input": getattr(usage, "prompt_tokens", 0) or 0, "output": getattr(usage, "completion_tokens", 0) or 0,
            "cache_write": 0, "cache_read": getattr(details, "cached_tokens", 0) or 0}
