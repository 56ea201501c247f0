"""Provider selection: explicit first, then key, base_url, the local model, or a clear error."""

from __future__ import annotations

import pytest

from child.providers import local
from child.providers.anthropic import AnthropicProvider
from child.providers.base import ProviderError
from child.providers.openai_compat import OpenAICompatProvider
from child.providers.scripted import ScriptedProvider
from child.providers.select import make_provider
from tests.fakes import scrub_env


class FakeLocal:
    @classmethod
    def for_job(cls, spec, *, model, stop):
        return cls(model)

    def __init__(self, model=None):
        self.name, self.model, self.synthetic = "local", model or "SmolLM2-135M-Instruct", False


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    scrub_env(monkeypatch)
    monkeypatch.setattr(local, "available", lambda: False)
    monkeypatch.setattr(local, "LocalProvider", FakeLocal)


def test_explicit_provider_wins(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-x")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or")
    stop = object()
    p = make_provider({"provider": "scripted", "script": [{"text": "hi"}], "goal": "g"}, stop=stop)
    assert isinstance(p, ScriptedProvider) and p.stop is stop and p.script == [{"text": "hi"}]
    p = make_provider({"provider": "OpenRouter", "model": "anthropic/claude-sonnet-4.6"})
    assert isinstance(p, OpenAICompatProvider) and p.model == "anthropic/claude-sonnet-4.6"
    assert isinstance(make_provider({"provider": "local"}), FakeLocal)


def test_config_fills_what_the_spec_leaves_out():
    p = make_provider({"model": "claude-x", "provider": None},
                      {"provider": "anthropic", "base_url": "http://127.0.0.1:9", "model": "ignored",
                       "temperature": 0.5})
    assert isinstance(p, AnthropicProvider)
    assert (p.model, p.base_url, p.temperature) == ("claude-x", "http://127.0.0.1:9", 0.5)


@pytest.mark.parametrize("var", ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"])
def test_anthropic_key_in_the_environment(monkeypatch, var):
    monkeypatch.setenv(var, "sk-x")
    monkeypatch.setattr(local, "available", lambda: True)
    p = make_provider({})
    assert isinstance(p, AnthropicProvider) and p.model == "claude-sonnet-4-6"


def test_base_url_means_an_anthropic_compatible_server(monkeypatch):
    monkeypatch.setattr(local, "available", lambda: True)
    p = make_provider({"base_url": "http://127.0.0.1:8000", "model": "qwen"})
    assert isinstance(p, AnthropicProvider) and (p.base_url, p.model) == ("http://127.0.0.1:8000", "qwen")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8001")
    assert make_provider({}).base_url == "http://127.0.0.1:8001"


def test_local_model_when_nothing_else(monkeypatch, capsys):
    monkeypatch.setattr(local, "available", lambda: True)
    p = make_provider({"model": "claude-sonnet-4-6"})
    assert isinstance(p, FakeLocal) and p.model == "SmolLM2-135M-Instruct"
    assert "embedded local model" in capsys.readouterr().err


def test_nothing_configured_is_a_clear_error():
    with pytest.raises(ProviderError) as err:
        make_provider({})
    message = str(err.value)
    assert "ANTHROPIC_API_KEY" in message and "base_url" in message and "hermesd[local]" in message


def test_unknown_provider():
    with pytest.raises(ProviderError, match="unknown provider 'gpt9'.*anthropic, openai-compat, local, scripted"):
        make_provider({"provider": "gpt9"})


def test_every_provider_of_the_table_is_reachable_and_its_env_goes_to_ray_items():
    """The one provider table: each row names a class that exists, its aliases select it, and the
    variables it reads are forwarded to batch items on Ray (forgetting that broke a provider there)."""
    import importlib

    from child.item import FORWARDED_ENV
    from child.zygote import preload_for
    from hermesd.contract.providers import PROVIDER_TABLE, PROVIDERS, provider_entry

    assert PROVIDERS == tuple(p.name for p in PROVIDER_TABLE)
    for entry in PROVIDER_TABLE:
        assert hasattr(importlib.import_module(entry.module), entry.cls), entry
        assert all(provider_entry(name.upper()) is entry for name in (entry.name, *entry.aliases))
        assert set(entry.env) <= set(FORWARDED_ENV)
        assert set(entry.preload) <= set(preload_for(entry.name, None))
    assert provider_entry("gpt9") is None
