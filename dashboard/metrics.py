"""``/metrics``: the daemon in Prometheus' text format, through ``prometheus_client``.

One :class:`DaemonCollector` in a ``CollectorRegistry`` of its own; each scrape reads ``status``
and ``usage`` (by model) through the dashboard's :class:`dashboard.link.Link` (cached a second,
so scrapers and browsers together cost the daemon at most one of each per second) and the
dashboard's :class:`dashboard.index.Index` for what only the jobs say (kinds, resumes).  The
series are listed in docs/operations.md ("Metrics")."""

from __future__ import annotations

import time
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from client.connection import ClientError
from dashboard.index import Index
from hermesd.protocol import ProtocolError

TOKEN_TYPES = ("input", "output", "cache_read", "cache_write")
OUTCOME_CODES = {"rate_limited": "429", "overloaded": "529"}
"""The governor's outcomes that are HTTP statuses of the provider (``hermesd.governor.limiter.OUTCOMES``)."""


def gauge(name: str, doc: str, labels: tuple[str, ...] = (), rows: Any = ()) -> GaugeMetricFamily:
    """A gauge family with ``rows`` of ``(label values, value)``."""
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), float(value))
    return family


def counter(name: str, doc: str, labels: tuple[str, ...], rows: Any) -> CounterMetricFamily:
    """A counter family (``name`` without ``_total``: prometheus_client adds it)."""
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), float(value))
    return family


class DaemonCollector:
    """The daemon's series, read at each scrape (``collect``, prometheus_client's custom collector)."""

    def __init__(self, link: Any, index: Index):
        self.link, self.index = link, index

    def collect(self) -> Iterator[Metric]:
        """Every series; ``hermesd_up 0`` alone while the daemon cannot be reached."""
        try:
            began = time.perf_counter()
            status = self.link.cached("status", 1.0)
            took = time.perf_counter() - began
            usage = self.link.cached("usage", 1.0, by="model")
        except (ClientError, ProtocolError):
            yield gauge("hermesd_up", "1 when hermesd answers the dashboard, else 0.", rows=[((), 0)])
            return
        yield gauge("hermesd_up", "1 when hermesd answers the dashboard, else 0.", rows=[((), 1)])
        yield gauge("hermesd_uptime_seconds", "Seconds since hermesd started.", rows=[((), status.get("uptime_seconds") or 0)])
        yield gauge("hermesd_jobs", "Jobs kept by hermesd, by state (status: jobs).", ("state",),
                    [((s,), n) for s, n in sorted((status.get("jobs") or {}).items())])
        yield gauge("hermesd_jobs_by_kind", "Jobs the dashboard holds, by kind and state.", ("kind", "state"),
                    [(k, n) for k, n in sorted(self.index.counts().items())])
        yield gauge("hermesd_children_running", "Child processes running (status: children).",
                    rows=[((), status.get("children") or 0)])
        yield gauge("hermesd_queue_length", "Jobs waiting in the queue (status: queued).", rows=[((), status.get("queued") or 0)])
        caps = status.get("caps") or {}
        yield gauge("hermesd_cap_used", "Slots of each pool in use (status: caps).", ("pool",),
                    [((p,), c.get("used") or 0) for p, c in sorted(caps.items())])
        yield gauge("hermesd_cap_limit", "Each pool's limit (pools without one are left out).", ("pool",),
                    [((p,), c["limit"]) for p, c in sorted(caps.items()) if c.get("limit") is not None])
        yield from self.governor(status.get("governor") or [])
        yield from self.bill(status, usage)
        lag = status.get("loop_lag")
        if lag:
            yield gauge("hermesd_loop_lag_max_seconds", "The event loop's worst lag (HERMES_LOOP_LAG_MS probe).",
                        rows=[((), (lag.get("max_ms") or 0) / 1000)])
        yield gauge("hermesd_status_round_trip_seconds", "How long the dashboard's last status request took "
                    "(the daemon's loop lag as a client sees it).", rows=[((), took)])
        yield gauge("hermesd_job_resumes", "Resumes of the jobs the dashboard holds (a job resumed after a restart, "
                    "hermesd.resume); a gauge: it falls when retention removes a job.", rows=[((), self.index.resumes())])
        yield gauge("hermesd_approvals_pending", "Approval requests waiting for a person.",
                    rows=[((), len(self.index.approvals))])
        yield gauge("hermesd_last_event_seq", "The last event's seq.", rows=[((), status.get("last_seq") or 0)])

    def governor(self, limiters: list[dict[str, Any]]) -> Iterator[Metric]:
        """Per endpoint (``provider``: the endpoint label's first word): in flight, waiting, paused,
        calls by outcome and the provider's 429/529 answers."""
        def key(entry: dict[str, Any]) -> tuple[str, str]:
            label = str(entry.get("endpoint") or "")
            return label.split(" ", 1)[0], label

        yield gauge("hermesd_governor_in_flight", "Model calls granted and not yet reported.", ("provider", "endpoint"),
                    [(key(e), e.get("in_flight") or 0) for e in limiters])
        yield gauge("hermesd_governor_concurrency", "The endpoint's concurrency window (AIMD).", ("provider", "endpoint"),
                    [(key(e), e.get("concurrency") or 0) for e in limiters])
        yield gauge("hermesd_governor_waiting", "Jobs told to wait by the governor.", ("provider", "endpoint"),
                    [(key(e), len(e.get("waiting") or [])) for e in limiters])
        yield gauge("hermesd_governor_paused_seconds", "Seconds until the endpoint's pause ends (0: none).",
                    ("provider", "endpoint"), [(key(e), e.get("paused_seconds") or 0) for e in limiters])
        yield gauge("hermesd_governor_remaining", "What the provider's rate-limit headers said is left, by "
                    "dimension (requests, tokens, input_tokens, output_tokens).", ("provider", "endpoint", "dimension"),
                    [((*key(e), d), left.get("remaining") or 0) for e in limiters
                     for d, left in sorted((e.get("remaining") or {}).items())])
        yield counter("hermesd_governor_calls", "Model calls reported, by outcome.", ("provider", "endpoint", "outcome"),
                      [((*key(e), o), n) for e in limiters for o, n in sorted((e.get("calls") or {}).items())])
        yield counter("hermesd_provider_http_errors", "The provider's 429 (rate limited) and 529 (overloaded) answers.",
                      ("provider", "endpoint", "code"),
                      [((*key(e), code), (e.get("calls") or {}).get(o, 0)) for e in limiters
                      for o, code in OUTCOME_CODES.items()])

    def bill(self, status: dict[str, Any], usage: dict[str, Any]) -> Iterator[Metric]:
        """Tokens and cost by model (``usage`` by model, all time), today's spend and the budgets left."""
        rows = usage.get("rows") or []
        yield counter("hermesd_tokens", "Tokens of model calls by model and type (input counts every prompt "
                      "token, the cache's among them).", ("model", "type"),
                      [((str(r.get("key")), t), r.get(t) or 0) for r in rows for t in TOKEN_TYPES])
        yield counter("hermesd_cost_usd", "What model calls cost in USD, by model (those with a price).", ("model",),
                      [((str(r.get("key")),), r.get("cost_usd") or 0) for r in rows])
        yield counter("hermesd_model_calls", "Model calls, by model.", ("model",),
                      [((str(r.get("key")),), r.get("calls") or 0) for r in rows])
        spend = status.get("spend") or {}
        today = spend.get("today") or {}
        yield gauge("hermesd_spend_today_usd", "What was spent today (UTC).", rows=[((), today.get("cost_usd") or 0)])
        yield gauge("hermesd_spend_today_tokens", "Tokens used today (UTC).", rows=[((), today.get("tokens") or 0)])
        left = []
        for budget, used in (("daily_cost_usd", today.get("cost_usd") or 0), ("daily_tokens", today.get("tokens") or 0)):
            if spend.get(budget):
                left.append(((budget,), max(0.0, float(spend[budget]) - float(used))))
        yield gauge("hermesd_budget_remaining", "What is left of each daily budget (budgets:), in its unit.",
                    ("budget",), left)


def registry(link: Any, index: Index) -> CollectorRegistry:
    """A registry holding only the daemon's collector (no process or platform collectors: those are
    the dashboard's own, not hermesd's)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(DaemonCollector(link, index))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    """The text exposition of ``reg`` (``prometheus_client.generate_latest``)."""
    return generate_latest(reg)
