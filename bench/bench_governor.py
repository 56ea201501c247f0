"""The governor at a provider's limit: a batch of one-call prompts against a fake endpoint that says no.

The endpoint is the fake Anthropic server (``tests/fakes``) behind a token-bucket limit
(:class:`tests.fakes.limits.Limits`): beyond it, 429 ``rate_limit_error`` with ``retry-after``,
and the ``anthropic-ratelimit-*`` headers on every response — as the real API.  Each prompt is
one model call (``--latency`` seconds).  Cases:

* ``requests``: ``--limit`` requests per ``--window`` seconds (the issue's case: 120 prompts,
  16 workers, 20 requests per 10 s), the governor knowing nothing but what the endpoint says;
* ``requests, configured``: the same with ``rate_limits:`` set to the endpoint's rate;
* ``input tokens``: ``--limit`` requests' worth of input tokens per ``--window`` seconds (the
  size of one request measured first), no request limit.

Figures per case: failed prompts, refused requests per successful one, and the wall time of the
whole ``hermes-batch`` process over the ideal at the limit: ``prompts / (limit / window)``
seconds, the sustained rate the endpoint allows (its bucket starts full, so a run may beat it by
up to one window).  Goals: 0 failed; at most 0.2 refused per success; wall at most 1.15× ideal.

Usage::

    .venv/bin/python bench/bench_governor.py [--prompts 120] [--workers 16] [--limit 20] [--window 10]
        [--latency 0.2] [--cases requests,configured,tokens] [--json]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, thinking_block  # noqa: E402
from tests.fakes.limits import Limits, count_input_tokens  # noqa: E402

CASES = {"requests": "requests", "configured": "requests, configured", "tokens": "input tokens"}
GOALS = {"failed": 0, "refused_per_success": 0.2, "wall_over_ideal": 1.15}


def one_case(case: str, prompts: int, workers: int, limit: int, window: float, latency: float) -> dict:
    """Run one case to the end; returns its figures."""
    with FakeAnthropic(delay=latency) as api:
        api.default = Message([thinking_block("One short step to the answer."), text_block("done")])
        config = {"provider": "anthropic", "base_url": api.url, "model": "claude-bench",
                  "supervisor": {"max_children": max(16, workers)}}
        if case == "configured":
            config["rate_limits"] = {api.url: {"requests_per_minute": limit * 60.0 / window}}
        with daemon(config, warm=True) as d:
            data = d.base / "prompts.jsonl"
            data.write_text("".join(json.dumps({"prompt": f"prompt {i:05d}"}) + "\n" for i in range(prompts)))
            if case == "tokens":  # one request's size first, then a limit of `limit` of them per window
                _batch(d, data, 1, "probe", max_samples=1)
                size = count_input_tokens(api.requests[-1].body)
                api.limits = Limits(input_tokens=size * limit, window=window)
            else:
                api.limits = Limits(requests=limit, window=window)
            wall, code, stats = _batch(d, data, workers, "bench")
            refused, admitted = api.limits.refused_total, api.limits.admitted
    ideal = prompts / (limit / window)
    failed = stats.get("failed", 0) if isinstance(stats, dict) else None
    return {"case": CASES[case], "prompts": prompts, "workers": workers, "exit": code, "failed": failed,
            "succeeded": admitted, "refused": refused, "refused_per_success": refused / max(1, admitted),
            "ideal": ideal, "wall": wall, "wall_over_ideal": wall / ideal}


def _batch(d, data: Path, workers: int, name: str, max_samples: int | None = None) -> tuple[float, int, dict]:
    """``hermes-batch`` to the end: wall seconds, exit status, the run's prompt counts (checkpoint)."""
    argv = [sys.executable, "-c", "from client.batch import main; main()", "--dataset_file", str(data),
            "--batch_size", "50", "--run_name", name, "--num_workers", str(workers), "--output_dir",
            str(d.base / "out"), "--json"] + (["--max_samples", str(max_samples)] if max_samples else [])
    t0 = time.monotonic()
    out = subprocess.run(argv, env=d.env, cwd=str(d.work), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if out.returncode not in (0, 11):  # 11: prompts failed (counted below)
        raise RuntimeError(f"hermes-batch failed ({out.returncode}): {out.stderr[-2000:]}")
    checkpoint = json.loads((d.base / "out" / name / "checkpoint.json").read_text())
    return wall, out.returncode, {"failed": len(checkpoint.get("failed") or {})}


def run(prompts: int = 120, workers: int = 16, limit: int = 20, window: float = 10.0, latency: float = 0.2,
        cases: str = "requests,configured,tokens") -> list[dict]:
    """One row per case (``cases``: comma-separated names of :data:`CASES`)."""
    return [one_case(c, prompts, workers, limit, window, latency) for c in cases.split(",") if c]


def report(rows: list[dict], args: object = None) -> str:
    """The figures as text, each against its goal."""
    lines = ["governor at the limit: one-call prompts against an endpoint that says no", machine(),
             f"  {'case':<22} {'prompts':>7} {'workers':>7} {'failed':>6} {'refused/ok':>10} {'ideal':>7} "
             f"{'wall':>7} {'wall/ideal':>10}"]
    for r in rows:
        lines.append(f"  {r['case']:<22} {r['prompts']:>7} {r['workers']:>7} {r['failed']:>6} "
                     f"{r['refused_per_success']:>10.3f} {r['ideal']:>6.1f}s {r['wall']:>6.1f}s "
                     f"{r['wall_over_ideal']:>9.2f}x")
    met = all(r["failed"] <= GOALS["failed"] and r["refused_per_success"] <= GOALS["refused_per_success"]
              and r["wall_over_ideal"] <= GOALS["wall_over_ideal"] for r in rows)
    lines.append(f"  goals: 0 failed, ≤ {GOALS['refused_per_success']} refused per success, wall ≤ "
                 f"{GOALS['wall_over_ideal']}× ideal: {'met' if met else 'NOT met'}")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, report, prompts=120, workers=16, limit=20, window=10.0, latency=0.2,
                 cases="requests,configured,tokens")
