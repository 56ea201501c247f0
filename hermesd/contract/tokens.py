"""Token counts and the estimate of them: :data:`TOKEN_KEYS` (the counts of a model call, a job
and a bill) and :func:`estimate_tokens` (text per token before a provider has counted).  A leaf
(standard library only) of :mod:`hermesd.contract`.
"""

from __future__ import annotations

import json
from typing import Any

TOKEN_KEYS = ("input", "output", "cache_write", "cache_read")
"""The token counts of a model call, a job and a bill.  ``input`` is every prompt token and
``output`` every generated one (Hermes' meaning); ``cache_write`` and ``cache_read`` say how
many of the input tokens were written to and read from the provider's prompt cache, so the
uncached rest is ``input - cache_write - cache_read``."""

BYTES_PER_TOKEN = 4
"""The estimate of text per token hermesd uses before a provider has counted (about four
characters of English per token: https://help.openai.com/en/articles/4936856)."""


def estimate_tokens(value: Any) -> int:
    """Estimated tokens of ``value`` (messages, content blocks, text) as sent: its compact JSON's
    UTF-8 bytes over :data:`BYTES_PER_TOKEN`.  Only an estimate, for deciding when to shorten;
    what a call really cost is what the provider's usage reports."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN
