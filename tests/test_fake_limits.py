"""The fake servers say no as the real APIs do (tests/fakes/limits.py), seen through the real SDKs."""

from __future__ import annotations

import datetime
import time

import anthropic
import openai
import pytest

from tests.fakes.anthropic_server import DEFAULT_USAGE, FakeAnthropic, Message, text_block
from tests.fakes.limits import Limits, openai_duration
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import wait_for


def _claude(api: FakeAnthropic) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=api.url, api_key="test-key", max_retries=0)


def _ask(client: anthropic.Anthropic, text: str = "hi", max_tokens: int = 16):
    return client.messages.with_raw_response.create(model="claude-x", max_tokens=max_tokens,
                                                     messages=[{"role": "user", "content": text}])


def test_requests_limit_refuses_with_retry_after_and_headers_on_every_response():
    with FakeAnthropic(limits=Limits(requests=2, window=10.0, retry_after_ms=True)) as api:
        client = _claude(api)
        first, second = _ask(client), _ask(client)
        assert [r.headers["anthropic-ratelimit-requests-remaining"] for r in (first, second)] == ["1", "0"]
        assert first.headers["anthropic-ratelimit-requests-limit"] == "2"
        reset = datetime.datetime.fromisoformat(second.headers["anthropic-ratelimit-requests-reset"])
        ahead = (reset - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        assert 5 <= ahead <= 11  # two requests of a bucket of 2 per 10 s: full again in ~10 s
        with pytest.raises(anthropic.RateLimitError) as err:
            _ask(client)
        response = err.value.response
        assert err.value.type == "rate_limit_error"
        assert response.headers["retry-after"] in ("4", "5") and 4000 <= int(response.headers["retry-after-ms"]) <= 5000
        assert response.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert api.limits.refused == {"rate_limit": 1} and api.limits.admitted == 2


def test_a_refused_request_keeps_its_queued_reply():
    with FakeAnthropic(limits=Limits(requests=1, window=60.0)) as api:
        api.reply_text("first").reply_text("second")
        client = _claude(api)
        assert _ask(client).parse().content[0].text == "first"
        with pytest.raises(anthropic.RateLimitError):
            _ask(client)
        assert api.pending() == 1


def test_token_limits_count_input_and_output_as_the_usage_reports_them():
    with FakeAnthropic(limits=Limits(input_tokens=1000, output_tokens=10, window=60.0)) as api:
        api.reply(Message([text_block("big")], usage={"input_tokens": 300, "cache_creation_input_tokens": 50,
                                                      "cache_read_input_tokens": 400, "output_tokens": 5}))
        client = _claude(api)
        ok = _ask(client, "x" * 400)
        assert ok.parse().usage.input_tokens == 300  # charged as reported: input and cache writes, not reads
        assert ok.headers["anthropic-ratelimit-input-tokens-remaining"] == str(1000 - 350)
        assert ok.headers["anthropic-ratelimit-output-tokens-remaining"] == "5"
        default = _ask(client)  # a reply without usage of its own reports DEFAULT_USAGE, and is charged so
        assert int(default.headers["anthropic-ratelimit-input-tokens-remaining"]) == 650 - DEFAULT_USAGE["input_tokens"]
        assert default.headers["anthropic-ratelimit-output-tokens-remaining"] == "0"  # its 7 output tokens: owed
        with pytest.raises(anthropic.RateLimitError):  # the output bucket is empty
            _ask(client)
        assert api.limits.charged_input == 350 + DEFAULT_USAGE["input_tokens"]


def test_an_outage_answers_529_without_retry_after_then_recovers():
    with FakeAnthropic(limits=Limits()) as api:
        client = _claude(api)
        recovers = api.limits.outage(0.5)
        with pytest.raises(anthropic.InternalServerError) as err:
            _ask(client)
        assert err.value.status_code == 529 and err.value.type == "overloaded_error"
        assert "retry-after" not in err.value.response.headers
        wait_for(lambda: time.monotonic() >= recovers, timeout=5, what="the outage's end")
        assert _ask(client).parse().content[0].text
        assert [what for _, what in api.limits.history] == ["overloaded", "admitted"]
        assert api.limits.history[0][0] < recovers <= api.limits.history[1][0]


def test_overloaded_quota_and_context_window():
    with FakeAnthropic(limits=Limits(context_window=50).overload(1, retry_after=2)) as api:
        client = _claude(api)
        with pytest.raises(anthropic.InternalServerError) as err:
            _ask(client)
        assert err.value.status_code == 529 and err.value.type == "overloaded_error"
        assert err.value.response.headers["retry-after"] == "2"
        with pytest.raises(anthropic.BadRequestError) as err:
            _ask(client, "y" * 400)
        assert err.value.type == "invalid_request_error" and "prompt is too long" in str(err.value)
        api.limits.quota_exhausted = True
        with pytest.raises(anthropic.RateLimitError) as err:
            _ask(client)
        assert "spend limit" in str(err.value) and "retry-after" not in err.value.response.headers
        assert api.limits.refused == {"overloaded": 1, "context": 1, "quota": 1}


def test_openai_headers_and_refusals():
    with FakeOpenAI(limits=Limits(requests=1, input_tokens=5000, window=60.0)) as api:
        client = openai.OpenAI(base_url=api.url + "/v1", api_key="test-key", max_retries=0)
        ok = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert ok.headers["x-ratelimit-limit-requests"] == "1" and ok.headers["x-ratelimit-remaining-requests"] == "0"
        assert ok.headers["x-ratelimit-reset-requests"].endswith("s") and "x-ratelimit-remaining-tokens" in ok.headers
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert err.value.code == "rate_limit_exceeded" and err.value.response.headers["retry-after"]
        api.limits.quota_exhausted = True
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert err.value.code == "insufficient_quota"


@pytest.mark.parametrize("seconds, text", [(360, "6m0s"), (1, "1s"), (0.25, "250ms"), (61.5, "1m1.5s")])
def test_openai_durations(seconds, text):
    assert openai_duration(seconds) == text
