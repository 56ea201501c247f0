"""The small interface every model provider implements.

Messages use the internal format of :mod:`child.messages` (Anthropic-style
content blocks).  A provider turns ``(system, messages, tools)`` into one
assistant :class:`Completion`; the agent loop in :mod:`child.agent` does the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermesd.contract.tokens import TOKEN_KEYS


@dataclass
class Completion:
    """One model response.

    ``content``: list of content blocks (``text``, ``thinking``, ``tool_use``);
    ``stop_reason``: ``"end_turn"``, ``"tool_use"``, ``"max_tokens"`` or ``"stop_sequence"``;
    ``usage``: tokens, ``{"input", "output", "cache_write", "cache_read"}``: ``input`` is
    every prompt token (as Hermes counts them), ``cache_write`` and ``cache_read`` how many
    of those were written to and read from the provider's prompt cache (so the uncached
    rest, billed at the full input price, is ``input - cache_write - cache_read``).
    """

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))


class ProviderError(Exception):
    """A model call failed for good (after the provider's own retries).

    ``retryable`` tells the loop whether a fresh attempt may succeed
    (e.g. a stream that ended early); ``status`` is the HTTP status if any;
    ``kind`` what the governor is told (:func:`kind_of`: ``rate_limited``,
    ``overloaded``, ``quota``, or ``error``); ``headers`` the response's limit
    headers (``hermesd.governor.headers.kept``); ``retry_after`` seconds when known.
    """

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 kind: str = "error", headers: dict[str, str] | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.kind = kind
        self.headers = headers or {}
        self.retry_after = retry_after


QUOTA_WORDS = ("insufficient_quota", "quota", "credit balance", "spend limit", "spend_limit", "billing",
               "usage limit")
"""Words of an error that says the money ran out (Anthropic's spend limit and credit balance;
OpenAI's ``insufficient_quota``, https://platform.openai.com/docs/guides/error-codes#api-errors):
such a 429 must not be retried."""


def kind_of(status: int | None, error_type: str | None, message: str) -> str:
    """What a failed call was, for the governor: ``quota`` (402, or a 429/400 that says the money
    ran out: :data:`QUOTA_WORDS`), ``rate_limited`` (429), ``overloaded`` (529, 503, or an
    ``overloaded_error``: https://docs.anthropic.com/en/api/errors), else ``error``."""
    words = f"{error_type or ''} {message}".lower()
    if status == 402 or (status in (400, 403, 429) and any(w in words for w in QUOTA_WORDS)):
        return "quota"
    if status == 429 or error_type == "rate_limit_error":
        return "rate_limited"
    if status in (503, 529) or error_type == "overloaded_error":
        return "overloaded"
    return "error"


def transient(status: int | None) -> bool:
    """A status after which the same call may succeed later without the governor's say (408, 409,
    5xx but 503 and 529, which the governor paces): the loop retries these itself."""
    return status is not None and (status in (408, 409) or (status >= 500 and status not in (503, 529)))


class Provider(Protocol):
    """A model behind one ``complete`` call.

    ``name``: provider name (``anthropic``, ``openai-compat``, ``local``, ``scripted``);
    ``model``: the model name sent to the server; ``synthetic``: ``True`` when
    the output is not from a real model (the ``scripted`` provider), so nobody trains on it.
    A provider with the trait ``metered`` in :data:`hermesd.contract.providers.PROVIDER_TABLE`
    (the governor grants its calls: :mod:`child.governor`) also has ``endpoint`` (its base URL),
    ``key_id`` (:func:`key_id` of its key) and ``last_headers`` (the limit headers of its latest
    response).
    """

    name: str
    model: str
    synthetic: bool

    def complete(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 *, max_tokens: int = 4096, reasoning_effort: str | None = None) -> Completion:
        """Return the next assistant message.

        ``tools`` are ``{"name", "description", "input_schema"}`` maps (JSON Schema).
        Raises :class:`ProviderError` when the call fails for good.
        """
        ...


def status_error(text: str, exc: Any, *, sdk_retried: bool) -> ProviderError:
    """The :class:`ProviderError` ``text`` of an SDK status error ``exc`` (Anthropic's or OpenAI's:
    ``status_code``, ``type``/``code``, ``message``, ``response``): its ``kind``, the response's
    limit headers and ``retry-after``; retryable by the loop when transient and the SDK did not
    retry it already (``sdk_retried``)."""
    from child.governor import limit_headers, retry_after_of

    headers = limit_headers(exc.response.headers)
    code = getattr(exc, "code", None)
    kind = kind_of(exc.status_code, getattr(exc, "type", None) or code, f"{code or ''} {exc.message}")
    return ProviderError(text, status=exc.status_code, kind=kind, headers=headers, retry_after=retry_after_of(headers),
                         retryable=kind == "error" and transient(exc.status_code) and not sdk_retried)


def key_id(key: str | None) -> str:
    """How a key is named to the daemon: the first 16 hex digits of its SHA-256 (``""`` without one)."""
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()[:16] if key else ""


def touch(provider: Any, what: str) -> None:
    """Record activity of ``provider``'s call in flight (a streamed event, a token): the
    agent gives a provider its :class:`child.activity.Activity` as ``provider.activity``;
    without one this does nothing.  Safe from the model call's worker thread."""
    activity = getattr(provider, "activity", None)
    if activity is not None:
        activity.touch(what)


TLS_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR")
"""The variables that choose the certificates the SDKs' HTTP transport trusts."""
_tls: dict[tuple[str | None, ...], Any] = {}


def tls_context() -> Any:
    """The ``ssl.SSLContext`` every SDK client of this process verifies servers with: the HTTP
    transport's default (``httpx2.create_ssl_context()``: the system's certificates, or those
    :data:`TLS_ENV` names), made once per value of those variables.

    Each client would otherwise make its own, parsing every certificate of the bundle again
    (about 140 here: a megabyte and a third of a second of CPU).  The warm template
    (:mod:`child.zygote`) makes it in its warm calls, so the children forked from it share
    the parsed certificates copy-on-write."""
    key = tuple(os.environ.get(name) for name in TLS_ENV)
    if key not in _tls:
        import httpx2

        _tls[key] = httpx2.create_ssl_context()
    return _tls[key]
