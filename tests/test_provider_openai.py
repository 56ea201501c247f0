"""Contract tests: the real ``openai`` SDK, through OpenAICompatProvider, against the fake chat-completions API."""

from __future__ import annotations

import pytest

from child import messages as m
from child.providers.base import ProviderError
from child.providers.openai_compat import OPENROUTER_URL, OpenAICompatProvider, to_chat
from tests.fakes import scrub_env
from tests.fakes.openai_server import ChatReply, FakeOpenAI

TOOL = {"name": "terminal", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


@pytest.fixture
def api(monkeypatch):
    scrub_env(monkeypatch)
    with FakeOpenAI() as server:
        yield server


def provider(api, **kwargs) -> OpenAICompatProvider:
    return OpenAICompatProvider("fake-model", base_url=api.url + "/v1", api_key="sk-or-test", **kwargs)


def test_tool_call_round_trip(api):
    api.reply(ChatReply("Looking.", [{"name": "terminal", "arguments": {"command": "pwd"}, "id": "call_1"}],
                        reasoning_content="I need the directory."))
    api.reply_text("It is /tmp.")
    p = provider(api)
    first = p.complete("be brief", [m.user("where am I?")], [TOOL], reasoning_effort="high")
    assert first.content == [m.thinking("I need the directory."), m.text("Looking."),
                             m.tool_use("terminal", {"command": "pwd"}, id="call_1")]
    assert first.stop_reason == "tool_use"
    assert first.usage == {"input": 11, "output": 5, "cache_write": 0, "cache_read": 0}
    conversation = [m.user("where am I?"), m.assistant(first.content), m.user(m.tool_result("call_1", "/tmp"))]
    second = p.complete("be brief", conversation, [TOOL])
    assert second.content == [m.text("It is /tmp.")] and second.stop_reason == "end_turn"

    sent = [r.body for r in api.requests]
    assert sent[0]["tools"] == [{"type": "function", "function": {
        "name": "terminal", "description": "Run a shell command.", "parameters": TOOL["input_schema"]}}]
    assert sent[0]["reasoning_effort"] == "high" and sent[0]["max_tokens"] == 4096
    assert sent[0]["messages"] == [{"role": "system", "content": "be brief"},
                                   {"role": "user", "content": "where am I?"}]
    assert sent[1]["messages"][2:] == [
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "pwd"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "/tmp"},
    ]
    assert "reasoning_effort" not in sent[1]
    assert api.requests[0].headers["authorization"] == "Bearer sk-or-test"
    assert api.requests[0].path == "/v1/chat/completions"


@pytest.mark.parametrize("raw", ['{"command": "pw', '["pwd"]'])
def test_bad_json_arguments_become_a_marked_tool_use(api, raw):
    api.reply_tool_call("terminal", raw, id="call_bad")
    reply = provider(api).complete("", [m.user("go")], [TOOL])
    assert reply.content == [m.tool_use("terminal", {m.INVALID_JSON: raw}, id="call_bad")]
    resent = to_chat("", [m.assistant(reply.content)])
    assert resent[0]["tool_calls"][0]["function"]["arguments"] == raw


def test_sdk_retries_rate_limit(api):
    api.reply_error(429, "slow down", headers={"retry-after-ms": "1"}).reply_text("ok")
    assert provider(api).complete("", [m.user("hi")], []).content == [m.text("ok")]
    assert len(api.requests) == 2


@pytest.mark.parametrize("status", [400, 401])
def test_no_retry_on_client_errors(api, status):
    api.reply_error(status, "bad request")
    with pytest.raises(ProviderError) as err:
        provider(api).complete("", [m.user("hi")], [])
    assert err.value.status == status and not err.value.retryable
    assert "bad request" in str(err.value) and "sk-or-test" not in str(err.value)
    assert len(api.requests) == 1


def test_length_finish_reason(api):
    api.reply(ChatReply("cut", finish_reason="length"))
    assert provider(api).complete("", [m.user("hi")], []).stop_reason == "max_tokens"


def test_keys_from_environment(api, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-env")
    assert OpenAICompatProvider("m").base_url == OPENROUTER_URL
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-env")
    OpenAICompatProvider("m", base_url=api.url + "/v1").complete("", [m.user("hi")], [])
    assert api.requests[0].headers["authorization"] == "Bearer sk-openai-env"
    assert OpenAICompatProvider("m", base_url="https://openrouter.ai/api/v1")._api_key == "sk-or-env"


def test_base_url_without_key_and_missing_settings(api, monkeypatch):
    OpenAICompatProvider("m", base_url=api.url + "/v1").complete("", [m.user("hi")], [])
    assert api.requests[0].headers["authorization"] == "Bearer hermesd-no-key"
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        OpenAICompatProvider("m")
    with pytest.raises(ProviderError, match="model"):
        OpenAICompatProvider(None, base_url=api.url)
