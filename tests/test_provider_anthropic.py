"""Contract tests: the real ``anthropic`` SDK, through AnthropicProvider, against the fake Messages API."""

from __future__ import annotations

import time

import pytest
from tests.fakes import scrub_env
from tests.fakes.anthropic_server import FakeAnthropic, text_block, thinking_block, tool_use_block

from child import messages as m
from child.providers.anthropic import NO_KEY, AnthropicProvider, wire_messages
from child.providers.base import ProviderError

TOOL = {"name": "terminal", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


@pytest.fixture
def api(monkeypatch):
    scrub_env(monkeypatch)
    with FakeAnthropic() as server:
        yield server


def provider(api, **kwargs) -> AnthropicProvider:
    return AnthropicProvider("claude-test", base_url=api.url, api_key="sk-test-key", **kwargs)


def test_tool_use_turn_and_thinking_signature_round_trip(api):
    api.reply_tool_use("terminal", {"command": "ls -la"}, id="toolu_1", thinking="I should look.")
    api.reply_text("two files")
    p = provider(api)
    first = p.complete("be brief", [m.user("list files")], [TOOL], reasoning_effort="low")
    assert first.stop_reason == "tool_use"
    assert first.content == [
        {"type": "thinking", "thinking": "I should look.", "signature": "fake-signature"},
        {"type": "tool_use", "id": "toolu_1", "name": "terminal", "input": {"command": "ls -la"}},
    ]
    assert first.usage == {"input": 12, "output": 7, "cache_write": 0, "cache_read": 0}
    conversation = [m.user("list files"), m.assistant(first.content), m.user(m.tool_result("toolu_1", "a\nb"))]
    second = p.complete("be brief", conversation, [TOOL], reasoning_effort="low")
    assert second.content == [{"type": "text", "text": "two files"}]
    assert second.stop_reason == "end_turn"

    sent = [r.body for r in api.requests]
    assert sent[0]["tools"] == [{**TOOL, "cache_control": {"type": "ephemeral"}}]  # tests/test_prompt_cache.py
    assert sent[0]["system"] == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    assert sent[0]["stream"] is True
    assert sent[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent[0]["max_tokens"] == 4096 + 2048
    assert sent[1]["messages"][1]["content"][0] == {
        "type": "thinking", "thinking": "I should look.", "signature": "fake-signature"}
    assert sent[1]["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb", "is_error": False,
         "cache_control": {"type": "ephemeral"}}]
    assert api.requests[0].headers["authorization"] == "Bearer sk-test-key"
    assert "anthropic-version" in api.requests[0].headers


def test_streamed_tool_input_is_assembled(api):
    nested = {"command": "printf 'héllo \"world\"'", "env": {"A": [1, 2.5, None, True]}, "long": "x" * 500}
    api.reply_tool_use("terminal", nested, text="Running it.")
    reply = provider(api).complete("", [m.user("go")], [TOOL])
    assert reply.content[0] == {"type": "text", "text": "Running it."}
    assert reply.content[1]["input"] == nested
    assert "system" not in api.requests[0].body
    assert "thinking" not in api.requests[0].body


@pytest.mark.parametrize("status, headers", [
    (429, {"retry_after_ms": 1}), (529, {"retry_after_ms": 1}), (500, {"retry_after": 0.001})])
def test_sdk_retries_honouring_retry_after(api, status, headers):
    api.reply_error(status, **headers).reply_error(status, **headers).reply_text("ok")
    started = time.monotonic()
    reply = provider(api).complete("", [m.user("hi")], [])
    assert m.final_text(m.assistant(reply.content)) == "ok"
    assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "1", "2"]
    assert time.monotonic() - started < 1.0  # the SDK's own backoff would take over 1.1 s


def test_gives_up_after_max_retries(api):
    for _ in range(3):
        api.reply_error(529, "Overloaded", retry_after_ms=1)
    with pytest.raises(ProviderError) as err:
        provider(api, max_retries=2).complete("", [m.user("hi")], [])
    assert err.value.status == 529 and not err.value.retryable
    assert "overloaded_error" in str(err.value)
    assert len(api.requests) == 3


@pytest.mark.parametrize("status", [400, 401])
def test_no_retry_on_client_errors(api, status):
    api.reply_error(status, "nope", retry_after_ms=1)
    with pytest.raises(ProviderError) as err:
        provider(api).complete("", [m.user("hi")], [])
    assert err.value.status == status and not err.value.retryable
    assert len(api.requests) == 1
    assert "sk-test-key" not in str(err.value)
    if status == 401:
        assert "ANTHROPIC_API_KEY" in str(err.value)


def test_midstream_overloaded_error_is_retryable(api):
    api.reply_stream_error("overloaded_error", content=[text_block("partial")])
    with pytest.raises(ProviderError) as err:
        provider(api).complete("", [m.user("hi")], [])
    assert err.value.retryable
    assert "overloaded_error" in str(err.value)
    assert len(api.requests) == 1  # the SDK does not retry a stream that already started


def test_stream_without_message_stop_is_retryable(api):
    api.reply_truncated([thinking_block("hmm")])
    with pytest.raises(ProviderError) as err:
        provider(api).complete("", [m.user("hi")], [])
    assert err.value.retryable and "message_stop" in str(err.value)


def test_base_url_without_key_sends_placeholder(api):
    reply = AnthropicProvider("claude-test", base_url=api.url).complete("", [m.user("ping")], [])
    assert m.final_text(m.assistant(reply.content)) == "Done: ping"
    assert api.requests[0].headers["authorization"] == f"Bearer {NO_KEY}"


def test_key_and_base_url_from_environment(api, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    AnthropicProvider("anthropic/claude-test").complete("", [m.user("ping")], [])
    assert api.requests[0].headers["authorization"] == "Bearer sk-env-key"
    assert api.requests[0].body["model"] == "claude-test"


def test_no_credentials_is_a_clear_error(monkeypatch):
    scrub_env(monkeypatch)
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider("claude-test")


def test_request_options(api):
    p = provider(api, temperature=0.3)
    p.complete("", [m.user("hi")], [], max_tokens=100)
    assert api.requests[0].body["temperature"] == 0.3
    assert api.requests[0].body["max_tokens"] == 100
    with pytest.raises(ProviderError, match="reasoning_effort"):
        p.complete("", [m.user("hi")], [], reasoning_effort="extreme")
    assert "thinking" not in p.request("", [], [], 100, "none")


def test_unsigned_thinking_is_not_sent():
    conversation = [m.assistant([m.thinking("from another provider"), m.text("hi"),
                                 m.thinking("signed", "sig")])]
    assert wire_messages(conversation)[0]["content"] == [m.text("hi"), m.thinking("signed", "sig")]


def test_fake_answers_non_streaming_requests(api):
    import anthropic

    api.reply_tool_use("terminal", {"command": "pwd"}, id="toolu_x")
    client = anthropic.Anthropic(api_key="sk-test-key", base_url=api.url, max_retries=0)
    message = client.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].type == "tool_use" and message.content[0].input == {"command": "pwd"}
    assert message.stop_reason == "tool_use"
    assert tool_use_block("a", {}, "id1") == {"type": "tool_use", "id": "id1", "name": "a", "input": {}}
