"""Model providers: one small module each behind the interface of :mod:`child.providers.base`.

* :mod:`~child.providers.anthropic` — Messages API (Anthropic and compatible servers)
* :mod:`~child.providers.openai_compat` — chat completions (OpenRouter, OpenAI-style servers)
* :mod:`~child.providers.local` — the embedded SmolLM2 model (no key, no network)
* :mod:`~child.providers.scripted` — deterministic and ``synthetic``, for tests and demos

:func:`make_provider` (in :mod:`~child.providers.select`) picks one for a job
spec.  Nothing here imports a provider SDK: each provider does on its first call.
"""

from child.providers.base import Completion, Provider, ProviderError
from child.providers.select import make_provider

__all__ = ["Completion", "Provider", "ProviderError", "make_provider"]
