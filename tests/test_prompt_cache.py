"""The prompt cache: breakpoints and a byte-stable prefix through the real SDKs, and cache
tokens counted by the fakes as the APIs count them (tests.fakes.cache)."""

from __future__ import annotations

import json

import pytest
from tests.fakes import scrub_env
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.cache import PromptCache, anthropic_blocks
from tests.fakes.openai_server import FakeOpenAI

from child import messages as m
from child.providers.anthropic import AnthropicProvider
from child.providers.openai_compat import OpenAICompatProvider

TOOLS = [{"name": n, "description": f"The {n} tool. " * 40, "input_schema": {"type": "object", "properties": {}}}
         for n in ("read_file", "terminal")]  # about 300 fake tokens: over the minimum of 256 below
SYSTEM = "You are a careful agent. " * 60  # about 400 more


@pytest.fixture
def api(monkeypatch):
    scrub_env(monkeypatch)
    with FakeAnthropic(cache=PromptCache(min_tokens=256)) as server:
        yield server


def marks(body):
    """Where the request's cache_control markers sit: ('tools', i) / ('system', 0) / (message, block)."""
    found = [("tools", i) for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    found += [("system", i) for i, b in enumerate(body["system"]) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        content = message["content"] if isinstance(message["content"], list) else []
        found += [(i, j) for j, b in enumerate(content) if "cache_control" in b]
    return found


def conversation(turns):
    """A run's messages after ``turns`` tool rounds (each: tool_use, tool_result)."""
    messages = [m.user("Find the answer in the files.")]
    for n in range(turns):
        messages.append(m.assistant([m.tool_use("read_file", {"path": f"f{n}"}, id=f"toolu_{n}")]))
        messages.append(m.user(m.tool_result(f"toolu_{n}", f"contents of file {n}")))
    return messages


def test_breakpoints_on_last_tool_system_and_sliding_conversation(api):
    provider = AnthropicProvider("claude-test", base_url=api.url, api_key="k", max_retries=0)
    for turns in range(4):
        provider.complete(SYSTEM, conversation(turns), TOOLS)
    bodies = [r.body for r in api.requests]
    assert marks(bodies[0]) == [("tools", 1), ("system", 0), (0, 0)]
    assert marks(bodies[3]) == [("tools", 1), ("system", 0), (4, 0), (6, 0)]
    assert all(len(marks(b)) <= 4 for b in bodies)
    assert bodies[0]["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    # the prefix (markers taken out) of each call is byte-identical to the whole of the previous one
    for before, after in zip(bodies, bodies[1:]):
        old, new = anthropic_blocks(before)[0], anthropic_blocks(after)[0]
        assert json.dumps(new[:len(old)]) == json.dumps(old)
    # and the markers went on copies: the caller's messages and tools are unchanged
    assert "cache_control" not in json.dumps(conversation(3)) + json.dumps(TOOLS)


def test_cache_tokens_recorded_as_the_api_counts_them(api):
    provider = AnthropicProvider("claude-test", base_url=api.url, api_key="k", max_retries=0)
    first = provider.complete(SYSTEM, conversation(0), TOOLS).usage
    assert first["cache_read"] == 0 and first["cache_write"] > 256
    second = provider.complete(SYSTEM, conversation(1), TOOLS).usage
    assert second["cache_read"] == first["cache_write"]  # the whole first prompt is read back
    assert second["cache_write"] > 0
    assert second["input"] == second["cache_read"] + second["cache_write"]  # nothing after the last breakpoint
    usage = api.requests[1].usage
    assert second["input"] == (usage["input_tokens"] + usage["cache_creation_input_tokens"]
                               + usage["cache_read_input_tokens"])
    # another model has its own cache
    other = AnthropicProvider("claude-other", base_url=api.url, api_key="k", max_retries=0)
    assert other.complete(SYSTEM, conversation(1), TOOLS).usage["cache_read"] == 0


def test_short_prefix_and_expired_entries_are_not_read(monkeypatch):
    scrub_env(monkeypatch)
    now = [0.0]
    with FakeAnthropic(cache=PromptCache(min_tokens=10_000, clock=lambda: now[0])) as small, \
            FakeAnthropic(cache=PromptCache(min_tokens=256, ttl=300, clock=lambda: now[0])) as api:
        short = AnthropicProvider("claude-test", base_url=small.url, api_key="k", max_retries=0)
        for turns in range(2):
            usage = short.complete(SYSTEM, conversation(turns), TOOLS).usage
            assert usage["cache_write"] == usage["cache_read"] == 0
        provider = AnthropicProvider("claude-test", base_url=api.url, api_key="k", max_retries=0)
        provider.complete(SYSTEM, conversation(0), TOOLS)
        now[0] = 299.0  # a hit refreshes the lifetime ...
        assert provider.complete(SYSTEM, conversation(1), TOOLS).usage["cache_read"] > 0
        now[0] = 299.0 + 301.0  # ... and an entry not used for longer is gone
        assert provider.complete(SYSTEM, conversation(2), TOOLS).usage["cache_read"] == 0


def test_a_changed_byte_early_in_the_prefix_misses(api):
    provider = AnthropicProvider("claude-test", base_url=api.url, api_key="k", max_retries=0)
    provider.complete(SYSTEM, conversation(1), TOOLS)
    assert provider.complete(SYSTEM + ".", conversation(2), TOOLS).usage["cache_read"] > 0  # tools still match
    reordered = provider.complete(SYSTEM, conversation(2), TOOLS[::-1]).usage
    assert reordered["cache_read"] == 0


def test_openai_cached_tokens_recorded(monkeypatch):
    scrub_env(monkeypatch)
    with FakeOpenAI(cache=PromptCache(min_tokens=256)) as api:
        provider = OpenAICompatProvider("gpt-test", base_url=api.url + "/v1", api_key="k", max_retries=0)
        first = provider.complete(SYSTEM, conversation(0), TOOLS).usage
        second = provider.complete(SYSTEM, conversation(1), TOOLS).usage
    assert first["cache_read"] == 0 and first["cache_write"] == 0
    assert second["cache_read"] == first["input"] < second["input"]  # the whole first prompt, read back
    assert api.requests[1].body["messages"][:2] == api.requests[0].body["messages"]
