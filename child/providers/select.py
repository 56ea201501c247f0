"""Choose the provider of a run (SPEC §8): explicit first, then what the environment offers.

Order: the job spec's ``provider``, else the config's ``provider``; with none
named, an Anthropic key in the environment (``ANTHROPIC_API_KEY`` /
``ANTHROPIC_AUTH_TOKEN``) → ``anthropic``; else a configured ``base_url`` (spec,
config or ``ANTHROPIC_BASE_URL``) → ``anthropic`` at that URL; else the embedded
``local`` model if it is installed (with a one-line notice on stderr); else a
:class:`ProviderError` that says how to configure a model.  Never a silent fake:
``scripted`` is used only when named.

Provider SDKs are imported lazily (by the providers, on their first call).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from child.providers.base import Provider, ProviderError
from hermesd.contract import PROVIDERS

NAMES = PROVIDERS
ALIASES = {"openai": "openai-compat", "openai_compat": "openai-compat", "openrouter": "openai-compat",
           "claude": "anthropic"}

NOT_CONFIGURED = (
    "no model is configured: set ANTHROPIC_API_KEY for Claude; or put `provider` and `base_url` in "
    "~/.hermes/config.yaml (e.g. `provider: openai-compat`, `base_url: https://openrouter.ai/api/v1`, "
    "`model: ...` with OPENROUTER_API_KEY set, or `base_url: http://localhost:8000` for an "
    "Anthropic-compatible server); or install the embedded toy model with pip install 'hermesd[local]'. "
    "`provider: scripted` gives a synthetic demo without any model."
)


def make_provider(spec: dict[str, Any], config: dict[str, Any] | None = None, *, stop: Any = None) -> Provider:
    """Build the provider for the job ``spec``.

    ``spec`` and ``config`` (the daemon's settings, top-level keys) may carry
    ``provider``, ``model``, ``base_url`` and ``temperature``; the spec wins.  The
    spec's ``script`` and ``goal`` feed the ``scripted`` provider, whose sleeps
    ``stop`` (the child's stop flag) cuts short.  Raises :class:`ProviderError`
    for an unknown provider name, missing credentials or nothing configured.
    """
    config = config or {}

    def setting(key: str) -> Any:
        return spec.get(key) if spec.get(key) is not None else config.get(key)

    name, model, base_url = setting("provider"), setting("model"), setting("base_url")
    if not name:
        name = default_provider(base_url)
        if name == "local":
            model = None  # a configured model name is for a remote server, not the embedded one
            print("hermes-child: no model configured; using the embedded local model "
                  "(SmolLM2-135M, toy quality). Set ANTHROPIC_API_KEY or provider/base_url for real work.",
                  file=sys.stderr, flush=True)
    name = ALIASES.get(str(name).lower(), str(name).lower())
    if name == "anthropic":
        from child.providers.anthropic import AnthropicProvider

        return AnthropicProvider(model, base_url=base_url, temperature=setting("temperature"))
    if name == "openai-compat":
        from child.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(model, base_url=base_url, temperature=setting("temperature"))
    if name == "local":
        from child.providers import local

        return local.LocalProvider(model=model)
    if name == "scripted":
        from child.providers.scripted import ScriptedProvider

        return ScriptedProvider(spec.get("script"), goal=str(spec.get("goal") or ""), model=model, stop=stop)
    raise ProviderError(f"unknown provider {name!r}: use one of {', '.join(NAMES)}")


def default_provider(base_url: str | None) -> str:
    """The provider name when none is configured (see the module doc).

    Raises :class:`ProviderError` with :data:`NOT_CONFIGURED` when nothing fits.
    """
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        return "anthropic"
    if base_url or os.environ.get("ANTHROPIC_BASE_URL"):
        return "anthropic"
    try:
        from child.providers import local
    except ImportError:
        local = None
    if local is not None and local.available():
        return "local"
    raise ProviderError(NOT_CONFIGURED)
