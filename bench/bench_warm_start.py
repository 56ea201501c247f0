"""Warm start by default: batch overhead with the default configuration, and event-loop stalls.

Two figures, one run:

* **Batch overhead at 16 workers, default configuration.**  A daemon whose
  config names no ``start_method`` (so the default, ``forkserver``) runs
  ``hermes-batch`` over ``--prompts`` prompts of one scripted model call of
  ``--delay`` seconds (see :mod:`bench.bench_batch`); overhead = measured /
  ideal − 1.  The batch starts once the zygote is warm (``status``), as on a
  daemon that has been up for more than a few seconds.
* **Longest event-loop stall during ``--jobs`` back-to-back delegations while
  the zygote is killed twice.**  The daemon runs with the loop lag probe
  (``HERMES_LOOP_LAG_MS``, :mod:`hermesd.looplag`: a timer every 2 ms, each
  wake-up later than asked is time the loop could not serve anyone).  Each
  delegation (one scripted turn whose terminal tool records
  ``$HERMES_ZYGOTE``, so warm and cold starts can be counted) is sent the
  moment the previous one is terminal; the zygote is SIGKILLed before job
  ``jobs/3`` and ``2·jobs/3`` (whichever zygote is alive then, warm or
  warming up).  The stall is the largest lag the probe saw between the first
  request and the last answer; also printed: the three largest, how many
  exceeded 50 ms, the client's round trip of ``delegate``, and the same probe
  over 5 s of the idle daemon before the run (with two spares held): on a
  shared machine that is the share of the lag due to the machine (other
  processes holding the cores), not to the daemon.

Usage::

    .venv/bin/python bench/bench_warm_start.py [--prompts 1024] [--delay 1.0] [--workers 16] [--jobs 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_batch import dataset, one_run  # noqa: E402
from bench.common import daemon, ideal_seconds, machine, ms, pct, wait_for  # noqa: E402

PROBE_MS = 2.0
RECORD = [{"text": "recording how I started", "tool_calls": [{"name": "terminal", "input": {
    "command": "echo ${HERMES_ZYGOTE:-cold} >> starts.txt"}}]}, {"text": "done"}]


def warm(d, spares: int = 0) -> int:
    """Wait until the daemon's zygote is warm (and holds ``spares`` spares); its pid."""
    pid = wait_for(lambda: d.call("status")["start"].get("zygote"), 120, 0.05, "the zygote warm")
    if spares:
        wait_for(lambda: d.call("status")["start"].get("spares") == spares, 60, 0.05, f"{spares} spares held")
    return pid


def batch_overhead(prompts: int, delay: float, workers: int) -> dict:
    """One ``hermes-batch`` run on a daemon with the default configuration."""
    with daemon({"batch": {"max_turns": 2}}) as d:
        method = d.call("status")["start"]["method"]
        warm(d)
        data = dataset(d.base / "prompts.jsonl", prompts, 1, delay)
        result = one_run(d, data, workers, f"bench_default_{workers}")
        ideal = ideal_seconds(prompts, delay, workers)
        return {**result, "method": method, "workers": workers, "prompts": prompts,
                "completed": result["prompts"]["completed"], "ideal": ideal,
                "overhead": result["wall"] / ideal - 1}


def _zygote_of(d) -> int | None:
    """The daemon's zygote process, warm or warming up (not a spare)."""
    for proc in psutil.Process(d.proc.pid).children():
        try:
            title = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if title.startswith("hermes-zygote") and "(spare)" not in title:
            return proc.pid
    return None


def _window(probe: dict, t0: float, t1: float) -> list[float]:
    """The probe's lags (ms) that ended between ``t0`` and ``t1``, largest first."""
    return sorted((lag for t, lag in probe["stalls"] if t0 <= t <= t1), reverse=True)


def loop_stalls(jobs: int, idle: float = 5.0) -> dict:
    """``jobs`` delegations one after the other, the zygote killed twice; the probe's view,
    and before that its view of the idle daemon for ``idle`` seconds (the machine's share)."""
    with daemon({"delegation": {"max_turns": 3}}, env={"HERMES_LOOP_LAG_MS": str(PROBE_MS)}) as d:
        method = d.call("status")["start"]["method"]
        warm(d, 2)
        i0 = time.monotonic()
        time.sleep(idle)
        baseline = _window(d.call("status")["loop_lag"], i0, time.monotonic())
        kills, rtts, killed = {jobs // 3, 2 * jobs // 3}, [], []
        conn = d.conn(timeout=60)
        t0 = time.monotonic()
        for i in range(jobs):
            if i in kills:
                pid = wait_for(lambda: _zygote_of(d), 30, 0.01, "a zygote to kill")
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            sent = time.monotonic()
            rec = conn.call("delegate", goal=f"job {i}", cwd=str(d.work), script=RECORD, toolsets=["terminal"])
            rtts.append(time.monotonic() - sent)
            assert conn.call("wait", 70, id=rec["id"], timeout=60)["done"], f"job {i} not done"
        t1 = time.monotonic()
        probe = conn.call("status")["loop_lag"]
        conn.close()
        stalls = _window(probe, t0, t1)
        starts = (d.work / "starts.txt").read_text().split()
        return {"method": method, "jobs": jobs, "seconds": t1 - t0, "killed": killed, "probe_ms": PROBE_MS,
                "samples": probe["samples"], "max_stall_ms": stalls[0] if stalls else 0.0, "top": stalls[:3],
                "over_goal": sum(x > 50 for x in stalls), "idle_seconds": idle,
                "idle_max_ms": baseline[0] if baseline else 0.0,
                "warm": sum(s != "cold" for s in starts), "cold": starts.count("cold"),
                "lost_logged": d.log().count("zygote lost"), "rtt": rtts}


def run(prompts: int, delay: float, workers: int, jobs: int) -> dict:
    """Both figures."""
    return {"batch": batch_overhead(prompts, delay, workers), "stalls": loop_stalls(jobs)}


def report(result: dict) -> str:
    """The figures as text."""
    b, s = result["batch"], result["stalls"]
    return "\n".join([
        "warm start by default", machine(),
        f"  batch overhead, default configuration (start_method {b['method']}): {b['prompts']} prompts x 1s, "
        f"{b['workers']} workers: ideal {b['ideal']:.1f}s, measured {b['wall']:.1f}s, overhead {b['overhead']:.1%} "
        f"(goal <= 5%)",
        f"  event-loop stall, {s['jobs']} back-to-back delegations ({s['method']}), zygote SIGKILLed twice "
        f"(pids {', '.join(map(str, s['killed']))}): longest {s['max_stall_ms']:.1f} ms (goal <= 50 ms); "
        f"next {', '.join(f'{x:.1f}' for x in s['top'][1:]) or '-'} ms; probe every {s['probe_ms']:g} ms, "
        f"{s['samples']} samples",
        f"    over 50 ms: {s['over_goal']}; the same probe on the idle daemon ({s['idle_seconds']:g}s before): "
        f"longest {s['idle_max_ms']:.1f} ms (the machine's share, not the daemon's)",
        f"    starts: {s['warm']} warm, {s['cold']} cold; 'zygote lost' logged {s['lost_logged']}x; "
        f"{s['seconds']:.1f}s in all; delegate round trip p50 {ms(pct(s['rtt'], 50))}, "
        f"max {ms(max(s['rtt']))}",
    ])


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=1024)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.prompts, args.delay, args.workers, args.jobs)
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
