"""The model providers and what hermesd knows of their models.

A leaf (standard library only) of :mod:`hermesd.contract`: the one table of providers
(:data:`PROVIDER_TABLE`, their names :data:`PROVIDERS`, :func:`provider_entry`), the
variables that hold their keys (:data:`PROVIDER_KEYS`), the models' context windows
(:data:`CONTEXT_WINDOWS`, :func:`context_window`), the reasoning efforts a task may ask
for (:data:`REASONING_EFFORTS`) and how a child waiting for a rate limit says so
(:data:`PROVIDER_WAIT`).
"""

from __future__ import annotations

from dataclasses import dataclass


TRAITS: dict[str, str] = {
    "metered": "its calls go to a server that limits them: each is granted first by the governor "
               "(child.governor: the provider instance has endpoint, key_id and last_headers)",
    "free": "its calls cost nothing (this machine's own model, or no model at all): the bill prices them at "
            "zero whatever the model is called (hermesd.prices)",
}
"""The traits a provider of :data:`PROVIDER_TABLE` may have, with what each means to hermesd."""


@dataclass(frozen=True)
class ProviderEntry:
    """One model provider a child can run.

    ``name``: what a config, a task or a flag names it by (``aliases``: other names
    accepted for it); ``module``/``cls``: where its class is (``child/providers/``),
    made with ``cls(model, base_url=..., temperature=...)`` unless the class has a
    ``for_job`` classmethod (:func:`child.providers.select.make_provider`); ``env``:
    the environment variables it reads (keys, base URLs), which a batch item on a
    Ray cluster is given from its driver's environment (:mod:`child.item`);
    ``preload``: the modules the zygote imports for it (:mod:`child.zygote`; the SDK);
    ``traits``: what hermesd treats it as, names of :data:`TRAITS` (raises ``ValueError`` for
    another name).  A new provider is its module, a row here, and its SDK in ``pyproject.toml``.
    """

    name: str
    module: str
    cls: str
    env: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    traits: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.traits) - set(TRAITS))
        if unknown:
            raise ValueError(f"provider {self.name!r}: unknown traits {unknown} (known: {sorted(TRAITS)})")

    @property
    def free(self) -> bool:
        """Its calls cost nothing (the trait ``free``)."""
        return "free" in self.traits

    @property
    def metered(self) -> bool:
        """The governor grants its calls (the trait ``metered``)."""
        return "metered" in self.traits


PROVIDER_TABLE: tuple[ProviderEntry, ...] = (
    ProviderEntry("anthropic", "child.providers.anthropic", "AnthropicProvider",
                  env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"),
                  preload=("ssl", "child.providers.anthropic", "anthropic", "anthropic.types",
                           "anthropic.resources.messages"), aliases=("claude",), traits=frozenset({"metered"})),
    ProviderEntry("openai-compat", "child.providers.openai_compat", "OpenAICompatProvider",
                  env=("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY"),
                  preload=("ssl", "child.providers.openai_compat", "openai"),
                  aliases=("openai", "openai_compat", "openrouter"), traits=frozenset({"metered"})),
    # local loads its model in the child; scripted is in the zygote's runtime already
    ProviderEntry("local", "child.providers.local", "LocalProvider", traits=frozenset({"free"})),
    ProviderEntry("scripted", "child.providers.scripted", "ScriptedProvider", traits=frozenset({"free"})),
)
"""The model providers, the one table of them (:class:`ProviderEntry`)."""

PROVIDERS = tuple(p.name for p in PROVIDER_TABLE)
"""Model providers a child can run, by name (``child.providers.select``)."""


def provider_entry(name: str | None) -> ProviderEntry | None:
    """The :class:`ProviderEntry` called ``name`` or one of its aliases (any case), or None."""
    wanted = (name or "").strip().lower()
    return next((p for p in PROVIDER_TABLE if wanted == p.name or wanted in p.aliases), None)

PROVIDER_WAIT = "waiting for the provider's rate limit"
"""How a child told to wait by the governor (``hermesd.governor``) says so in its activity
(``child.progress``; ``ps``, ``top`` and a timeout's error show it)."""


PROVIDER_KEYS = tuple(v for p in PROVIDER_TABLE for v in p.env if not v.endswith("_BASE_URL"))
"""The environment variables that hold a model provider's key (each provider's ``env`` but its base
URL: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``, ``OPENAI_API_KEY``, ``OPENROUTER_API_KEY``): in
the child that calls the model, never in what its tools run."""

CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),   # https://docs.anthropic.com/en/docs/build-with-claude/context-windows (1M only with a beta)
    ("gpt-4.1", 1_047_576),  # https://platform.openai.com/docs/models/gpt-4.1
    ("gpt-4o", 128_000),     # https://platform.openai.com/docs/models/gpt-4o
    ("o3", 200_000), ("o4-mini", 200_000),  # https://platform.openai.com/docs/models
    ("smollm2", 8_192),      # SmolLM2's trained context (the embedded model runs with less: child.providers.local)
)
"""Known context windows in tokens, by model-name prefix (read 2026-12-01); the config's
``context_windows:`` comes first, :data:`DEFAULT_CONTEXT_WINDOW` for the rest."""

DEFAULT_CONTEXT_WINDOW = 128_000
"""The context window assumed for a model no table knows (tokens): the smallest of the current
large models', so that a session compacts early rather than too late."""


def context_window(model: str | None, configured: dict[str, int] | None = None) -> int:
    """The context window of ``model`` in tokens: ``configured`` (model name or prefix → tokens),
    then :data:`CONTEXT_WINDOWS`, else :data:`DEFAULT_CONTEXT_WINDOW`; the longest prefix wins."""
    name = (model or "").strip().lower()
    for table in ((configured or {}).items(), CONTEXT_WINDOWS):
        hits = sorted(((p, n) for p, n in table if name.startswith(str(p).lower())), key=lambda h: -len(h[0]))
        if hits:
            return int(hits[0][1])
    return DEFAULT_CONTEXT_WINDOW


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""The ``reasoning_effort`` values a task or a batch may ask for."""
