"""``/metrics`` of a daemon whose model says no: the governor's 429s and 529s by provider, its
endpoint's calls by outcome and what the headers left, tokens and cost by model — parsed with
``prometheus_client``'s parser, the values those of ``hermesctl status`` and ``usage``."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from tests.browser import Dashboard
from tests.fakes.anthropic_server import Error, FakeAnthropic
from tests.test_governor import _anthropic, warm


def _samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_governor_and_the_bill_in_metrics(make_daemon):
    with FakeAnthropic() as api:
        daemon = warm(make_daemon(_anthropic(api), env={"ANTHROPIC_API_KEY": "sk-ant-metrics-secret"}))
        api.reply(Error(429, "slow down", headers={"retry-after": "0.2"}))
        api.reply(Error(529, "overloaded", headers={"retry-after": "0.2"}))
        job = daemon.delegate("say hello", toolsets=["terminal"])["id"]
        assert daemon.wait_job(job, timeout=60)["status"] == "completed"
        dashboard = Dashboard(daemon)
        try:
            status, text = dashboard.http("/metrics")
        finally:
            dashboard.stop()
    assert status == 200 and "sk-ant-metrics-secret" not in text
    samples = _samples(text)
    said = json.loads(daemon.ctl("status", "--json").stdout)
    [limiter] = said["governor"]
    labels = (("endpoint", limiter["endpoint"]), ("provider", "anthropic"))
    assert samples[("hermesd_provider_http_errors_total", (("code", "429"), *labels))] == 1
    assert samples[("hermesd_provider_http_errors_total", (("code", "529"), *labels))] == 1
    for outcome, n in limiter["calls"].items():
        assert samples[("hermesd_governor_calls_total", (*labels[:1], ("outcome", outcome), *labels[1:]))] == n
    assert samples[("hermesd_governor_in_flight", labels)] == limiter["in_flight"]
    for dimension, left in (limiter.get("remaining") or {}).items():
        assert samples[("hermesd_governor_remaining", (("dimension", dimension), *labels))] == left["remaining"]
    usage = json.loads(daemon.ctl("usage", "--by", "model", "--json").stdout)
    [row] = usage["rows"]
    for kind in ("input", "output", "cache_read", "cache_write"):
        assert samples[("hermesd_tokens_total", (("model", row["key"]), ("type", kind)))] == row[kind]
    assert samples[("hermesd_model_calls_total", (("model", row["key"]),))] == row["calls"]
