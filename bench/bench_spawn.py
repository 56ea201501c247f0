"""Spawn latency: request → the child says hello, cold and warm, beside the floors.

For each start method a real hermesd runs jobs one after the other (scripted
provider, no tools, so a job is over right after its hello); the time is taken
in the client, from sending ``delegate`` to receiving the job's
``job.state running`` event (published when the child's ``child.hello``
arrives).  Two series each: one start on a quiet daemon (``--pause`` seconds,
0.1 by default, after each job, so the previous child has exited and been
reaped and a used spare replaced), and jobs back to back (the next request
sent as soon as the previous job is terminal: its child's exit, its reaping
and the replacement fork overlap the next start).  The floors are measured in
the same run: a new interpreter (``python -c pass``, and with ``-S``) and a
bare ``fork()`` + ``_exit`` + ``waitpid`` of this process.

A hello says little about readiness when the child imports its provider's SDK
only once it needs it, so a second pair of series takes the time from sending
``delegate`` to the child's first model request, with the ``anthropic``
provider against the fake Messages API (``tests/fakes``): a cold child imports
the SDK (about a second) first, a warm one was forked with it imported.
Usage::

    .venv/bin/python bench/bench_spawn.py [--runs 40] [--pause 0.1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import daemon, machine, pct, summary  # noqa: E402
from hermesd import protocol  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block  # noqa: E402


def floor_interpreter(runs: int, *flags: str) -> list[float]:
    """Seconds of ``python [flags] -c pass``, ``runs`` times."""
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)
        times.append(time.monotonic() - t0)
    return times


def floor_fork(runs: int) -> list[float]:
    """Seconds of a bare ``fork()`` + ``_exit(0)`` + ``waitpid``, ``runs`` times."""
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        times.append(time.monotonic() - t0)
    return times


def hello_latency(d, runs: int, pause: float = 0.0) -> list[float]:
    """Seconds from sending ``delegate`` to the job's ``running`` event, ``runs`` jobs in a
    row, ``pause`` seconds between the end of one and the next request."""
    conn = d.conn(timeout=60)
    sub = conn.subscribe()
    time.sleep(0.3)  # the subscription reaches the daemon
    times = []
    for i in range(runs + 2):
        t0 = time.monotonic()
        job = conn.call("delegate", goal=f"hello {i}", cwd=str(d.work), toolsets=[], script=[{"text": "hi"}])["id"]
        while True:
            assert sub.poll(60_000), "no event within 60 s"
            event = protocol.unpackb(sub.recv_multipart()[1])
            if event["job"] == job and event["type"] == "job.state" and event["data"]["status"] == "running":
                break
        elapsed = time.monotonic() - t0
        conn.call("wait", id=job, timeout=60)
        time.sleep(pause)
        if i >= 2:  # the first two warm up the daemon's own paths
            times.append(elapsed)
    sub.close()
    conn.close()
    return times


def first_request_latency(warm: bool, runs: int) -> list[float]:
    """Seconds from sending ``delegate`` to the fake server receiving the child's first request."""
    arrivals: list[float] = []

    def answer(request: object) -> Message:
        arrivals.append(time.monotonic())
        return Message([text_block("done")])

    with FakeAnthropic() as api:
        api.default = answer
        with daemon({"provider": "anthropic", "base_url": api.url}, warm=warm) as d:
            conn = d.conn(timeout=60)
            times = []
            for i in range(runs + 2):
                seen = len(arrivals)
                t0 = time.monotonic()
                job = conn.call("delegate", goal=f"ready {i}", cwd=str(d.work), toolsets=[])["id"]
                conn.call("wait", id=job, timeout=60)
                if i >= 2 and len(arrivals) > seen:
                    times.append(arrivals[seen] - t0)
            conn.close()
    return times


def run(runs: int, pause: float = 0.1) -> dict[str, list[float]]:
    """Every series of this benchmark, in seconds."""
    results = {"python -c pass": floor_interpreter(runs), "python -S -c pass": floor_interpreter(runs, "-S"),
               "bare fork()+exit+wait": floor_fork(runs * 5)}
    for warm, name in ((False, "cold start (spawn)"), (True, "warm start (forkserver)")):
        with daemon(warm=warm) as d:
            results[name] = hello_latency(d, runs, pause)
            results[name.split()[0] + ", back to back"] = hello_latency(d, runs)
    results["cold, first model request"] = first_request_latency(False, runs)
    results["warm, first model request"] = first_request_latency(True, runs)
    return results


def report(results: dict[str, list[float]]) -> str:
    """The figures as text, ratios side by side."""
    lines = ["spawn latency: request -> child hello (client side)", machine()]
    for name, values in results.items():
        lines.append(f"  {name:<26} {summary(values, 50, 95)}")
    cold, warm = (pct(results[k], 50) for k in ("cold start (spawn)", "warm start (forkserver)"))
    lines.append(f"  cold/warm p50 ratio, hello: {cold / warm:.1f}x on a quiet daemon; warm p50 / python -c pass "
                 f"p50: {warm / pct(results['python -c pass'], 50):.2f}")
    cold, warm = (pct(results[k], 50) for k in ("cold, back to back", "warm, back to back"))
    lines.append(f"  cold/warm p50 ratio, hello: {cold / warm:.1f}x back to back")
    cold, warm = (pct(results[k], 50) for k in ("cold, first model request", "warm, first model request"))
    lines.append(f"  cold/warm p50 ratio, first model request (anthropic SDK): {cold / warm:.1f}x")
    return "\n".join(lines)


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between jobs of the quiet series")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.runs, args.pause)
    print(json.dumps(results) if args.json else report(results))


if __name__ == "__main__":
    main()
