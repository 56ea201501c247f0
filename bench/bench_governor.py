"""The governor against a provider that says no: pacing at its limit, and the way back from an outage.

The endpoint is the fake Anthropic server (``tests/fakes``) behind a continuous token bucket
(:class:`tests.fakes.limits.Limits`, as the real API keeps its limits): beyond it, 429
``rate_limit_error`` with ``retry-after``, and the ``anthropic-ratelimit-*`` headers on every
response (``…-reset``: when the bucket is full again, to the second).  Each prompt is one model
call (``--latency`` seconds).  Cases:

* ``requests``: ``--limit`` requests per ``--window`` seconds (the issue's case: 120 prompts,
  16 workers, 20 requests per 10 s), the governor knowing nothing but what the endpoint says;
* ``configured``: the same with ``rate_limits:`` set to the endpoint's rate;
* ``tokens``: ``--limit`` prompts' worth of input tokens per ``--window`` seconds (the prompts
  differ in length; each reply's usage counts its prompt, four characters a token, and the
  bucket takes what the usage says), no request limit;
* ``outage``: no limit; once ``2 × workers`` prompts were answered the endpoint answers 529
  ``overloaded_error`` (no ``retry-after``) to everything for ``--outage`` seconds, then recovers.

Pacing figures: failed prompts, refused requests per successful one, and the wall time of the
whole ``hermes-batch`` process over the ideal.  The endpoint's bucket starts full, so the ideal
is the rest after the first bucketful at the sustained rate: ``(prompts - limit) / (limit /
window)`` (50 s for the issue's case; for ``tokens`` the same in the tokens the calls took); a
configured limit spreads its calls over the minute by design (its bucket holds a second's
worth), so ``configured`` is held to ``prompts / rate``.  Goals: 0 failed; at most 0.2 refused
per success; wall at most 1.15× the ideal.

Outage figures: how long after the recovery the first call was answered (goal: within 3 s: one
probe, then the rest), and the ``workers``-th; the calls refused during the outage; the pauses
the governor announced (``governor.paused``: one per burst, doubling per probe refused again).

Usage::

    .venv/bin/python bench/bench_governor.py [--prompts 120] [--workers 16] [--limit 20] [--window 10]
        [--latency 0.2] [--outage 15] [--cases requests,configured,tokens,outage] [--json]
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, thinking_block  # noqa: E402
from tests.fakes.limits import Limits, count_input_tokens  # noqa: E402

CASES = {"requests": "requests", "configured": "requests, configured", "tokens": "input tokens", "outage": "outage"}
GOALS = {"failed": 0, "refused_per_success": 0.2, "wall_over_ideal": 1.15, "recovery_seconds": 3.0}


def _reply(request) -> Message:
    """A one-step answer whose usage counts its prompt (as the real API's does)."""
    return Message([thinking_block("One short step to the answer."), text_block("done")],
                   usage={"input_tokens": count_input_tokens(request.body), "output_tokens": 7})


def _prompts(path: Path, count: int) -> Path:
    """``count`` prompts of differing lengths, one JSON line each."""
    path.write_text("".join(json.dumps({"prompt": f"prompt {i:05d} " + "word " * (i % 7 * 8)}) + "\n"
                            for i in range(count)))
    return path


def one_case(case: str, prompts: int, workers: int, limit: int, window: float, latency: float,
             outage: float) -> dict:
    """Run one case to the end; returns its figures."""
    with FakeAnthropic(delay=latency) as api:
        api.default = _reply
        config = {"provider": "anthropic", "base_url": api.url, "model": "claude-bench",
                  "supervisor": {"max_children": max(16, workers)}}
        if case == "configured":
            config["rate_limits"] = {api.url: {"requests_per_minute": limit * 60.0 / window}}
        with daemon(config, warm=True) as d:
            data = _prompts(d.base / "prompts.jsonl", prompts)
            if case == "outage":
                return _outage(d, api, data, workers, outage)
            capacity = float(limit)
            if case == "tokens":  # the prompts' mean size first, then a limit of `limit` of them per window
                api.limits = Limits()
                _batch(d, data, workers, "probe", max_samples=min(prompts, 14))
                capacity = api.limits.charged_input / api.limits.admitted * limit
                api.limits = Limits(input_tokens=int(capacity), window=window)
            else:
                api.limits = Limits(requests=limit, window=window)
            wall, code, failed = _batch(d, data, workers, "bench")
            refused, admitted = api.limits.refused_total, api.limits.admitted
            taken = api.limits.charged_input if case == "tokens" else admitted
    rate = capacity / window
    ideal = taken / rate if case == "configured" else max(0.0, taken - capacity) / rate
    return {"case": CASES[case], "prompts": prompts, "workers": workers, "exit": code, "failed": failed,
            "succeeded": admitted, "refused": refused, "refused_per_success": refused / max(1, admitted),
            "ideal": ideal, "wall": wall, "wall_over_ideal": wall / max(ideal, 1e-9)}


def _outage(d, api: FakeAnthropic, data: Path, workers: int, seconds: float) -> dict:
    """The batch through an outage of ``seconds`` that begins once ``2 × workers`` prompts were answered."""
    api.limits = limits = Limits()
    recovered: list[float] = []
    over = threading.Event()

    def begin() -> None:
        while limits.admitted < 2 * workers:
            if over.wait(0.01):
                return
        recovered.append(limits.outage(seconds))

    thread = threading.Thread(target=begin, daemon=True)
    thread.start()
    try:
        wall, code, failed = _batch(d, data, workers, "bench")
    finally:
        over.set()
        thread.join(5.0)
    paused = [e["data"]["seconds"] for e in d.call("events_since", since=0, types=["governor.paused"])["events"]]
    recovers = recovered[0] if recovered else float("inf")
    after = [t - recovers for t, what in limits.history if what == "admitted" and t >= recovers]
    began = recovers - seconds
    refused = sum(1 for t, what in limits.history if what == "overloaded" and began <= t < recovers)
    return {"case": CASES["outage"], "prompts": data.read_text().count("\n"), "workers": workers, "exit": code,
            "failed": failed, "outage": seconds, "refused": refused, "pauses": paused, "wall": wall,
            "first_after": after[0] if after else None,
            "fleet_after": after[workers - 1] if len(after) >= workers else None}


def _batch(d, data: Path, workers: int, name: str, max_samples: int | None = None) -> tuple[float, int, int]:
    """``hermes-batch`` to the end: wall seconds, exit status, the prompts that failed (checkpoint)."""
    argv = [sys.executable, "-c", "from client.batch import main; main()", "--dataset_file", str(data),
            "--batch_size", "50", "--run_name", name, "--num_workers", str(workers), "--output_dir",
            str(d.base / "out"), "--json"] + (["--max_samples", str(max_samples)] if max_samples else [])
    t0 = time.monotonic()
    out = subprocess.run(argv, env=d.env, cwd=str(d.work), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if out.returncode not in (0, 11):  # 11: prompts failed (counted below)
        raise RuntimeError(f"hermes-batch failed ({out.returncode}): {out.stderr[-2000:]}")
    checkpoint = json.loads((d.base / "out" / name / "checkpoint.json").read_text())
    return wall, out.returncode, len(checkpoint.get("failed") or {})


def run(prompts: int = 120, workers: int = 16, limit: int = 20, window: float = 10.0, latency: float = 0.2,
        outage: float = 15.0, cases: str = "requests,configured,tokens,outage") -> list[dict]:
    """One row per case (``cases``: comma-separated names of :data:`CASES`)."""
    return [one_case(c, prompts, workers, limit, window, latency, outage) for c in cases.split(",") if c]


def report(rows: list[dict], args: object = None) -> str:
    """The figures as text, each against its goal."""
    lines = ["governor against an endpoint that says no: pacing at its limit, the way back from an outage", machine()]
    paced = [r for r in rows if r["case"] != CASES["outage"]]
    if paced:
        lines.append(f"  {'case':<22} {'prompts':>7} {'workers':>7} {'failed':>6} {'refused/ok':>10} {'ideal':>7} "
                     f"{'wall':>7} {'wall/ideal':>10}")
        for r in paced:
            lines.append(f"  {r['case']:<22} {r['prompts']:>7} {r['workers']:>7} {r['failed']:>6} "
                         f"{r['refused_per_success']:>10.3f} {r['ideal']:>6.1f}s {r['wall']:>6.1f}s "
                         f"{r['wall_over_ideal']:>9.2f}x")
        met = all(r["failed"] <= GOALS["failed"] and r["refused_per_success"] <= GOALS["refused_per_success"]
                  and r["wall_over_ideal"] <= GOALS["wall_over_ideal"] for r in paced)
        lines.append(f"  goals: 0 failed, ≤ {GOALS['refused_per_success']} refused per success, wall ≤ "
                     f"{GOALS['wall_over_ideal']}× ideal: {'met' if met else 'NOT met'}")
    for r in rows:
        if r["case"] != CASES["outage"]:
            continue
        first, fleet = (f"{v:.2f}s" if v is not None else "never" for v in (r["first_after"], r["fleet_after"]))
        lines.append(f"  outage of {r['outage']:g}s (529 to everything, no retry-after), {r['prompts']} prompts, "
                     f"{r['workers']} workers: first answer {first} after the recovery, the {r['workers']}th {fleet}; "
                     f"{r['refused']} calls refused during it; pauses {', '.join(f'{p:g}s' for p in r['pauses'])}; "
                     f"{r['failed']} failed, wall {r['wall']:.1f}s")
        met = r["failed"] == 0 and r["first_after"] is not None and r["first_after"] <= GOALS["recovery_seconds"]
        lines.append(f"  goals: 0 failed, first answer ≤ {GOALS['recovery_seconds']:g}s after the recovery: "
                     f"{'met' if met else 'NOT met'}")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, report, prompts=120, workers=16, limit=20, window=10.0, latency=0.2,
                 outage=15.0, cases="requests,configured,tokens,outage")
