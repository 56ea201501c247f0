"""The small interface every model provider implements.

Messages use the internal format of :mod:`child.messages` (Anthropic-style
content blocks).  A provider turns ``(system, messages, tools)`` into one
assistant :class:`Completion`; the agent loop in :mod:`child.agent` does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from hermesd.contract import TOKEN_KEYS


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
    (e.g. a stream that ended early); ``status`` is the HTTP status if any.
    """

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class Provider(Protocol):
    """A model behind one ``complete`` call.

    ``name``: provider name (``anthropic``, ``openai-compat``, ``local``, ``scripted``);
    ``model``: the model name sent to the server; ``synthetic``: ``True`` when
    the output is not from a real model (the ``scripted`` provider), so nobody trains on it.
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


def touch(provider: Any, what: str) -> None:
    """Record activity of ``provider``'s call in flight (a streamed event, a token): the
    agent gives a provider its :class:`child.activity.Activity` as ``provider.activity``;
    without one this does nothing.  Safe from the model call's worker thread."""
    activity = getattr(provider, "activity", None)
    if activity is not None:
        activity.touch(what)
