"""Choose the provider of a run: explicit first, then what the environment offers.

Order: the job spec's ``provider``, else the config's ``provider``; with none
named, an Anthropic key in the environment (``ANTHROPIC_API_KEY`` /
``ANTHROPIC_AUTH_TOKEN``) → ``anthropic``; else a configured ``base_url`` (spec,
config or ``ANTHROPIC_BASE_URL``) → ``anthropic`` at that URL; else the embedded
``local`` model if it is installed (with a one-line notice on stderr); else a
:class:`ProviderError` that says how to configure a model.  Never a silent fake:
``scripted`` is used only when named.

The providers are the rows of :data:`hermesd.contract.providers.PROVIDER_TABLE` (name,
aliases, module and class); their SDKs are imported lazily (by the providers, on
their first call).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from child.providers.base import Provider, ProviderError
from hermesd.contract.providers import PROVIDERS, provider_entry
from hermesd.contract.wire import JobSpec

NOT_CONFIGURED = (
    "no model is configured: set ANTHROPIC_API_KEY for Claude; or put `provider` and `base_url` in "
    "~/.hermes/config.yaml (e.g. `provider: openai-compat`, `base_url: https://openrouter.ai/api/v1`, "
    "`model: ...` with OPENROUTER_API_KEY set, or `base_url: http://localhost:8000` for an "
    "Anthropic-compatible server); or install the embedded toy model with pip install 'hermesd[local]'. "
    "`provider: scripted` gives a synthetic demo without any model."
)


def make_provider(spec: JobSpec | dict[str, Any], config: dict[str, Any] | None = None, *,
                  stop: Any = None) -> Provider:
    """Build the provider for the job ``spec`` (a :class:`hermesd.contract.wire.JobSpec` or its wire map).

    ``spec`` and ``config`` (the daemon's settings, top-level keys) may carry
    ``provider``, ``model``, ``base_url`` and ``temperature``; the spec wins.  The
    spec's ``script`` and ``goal`` feed the ``scripted`` provider, whose sleeps
    ``stop`` (the child's stop flag) cuts short.  Raises :class:`ProviderError`
    for an unknown provider name, missing credentials or nothing configured.
    The SDKs of remote providers retry nothing themselves (``max_retries=0``): the
    governor paces 429/529 for the fleet and the agent loop retries the rest.
    """
    config = config or {}
    if isinstance(spec, JobSpec):
        spec = spec.to_wire()

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
    entry = provider_entry(str(name))
    if entry is None:
        raise ProviderError(f"unknown provider {str(name).lower()!r}: use one of {', '.join(PROVIDERS)}")
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    for_job = getattr(cls, "for_job", None)
    if for_job is not None:
        return for_job(spec, model=model, stop=stop)
    return cls(model, base_url=base_url, temperature=setting("temperature"), max_retries=0)


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
