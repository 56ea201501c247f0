"""Control round trip: ``status`` over one connection, throughput with concurrent
clients, and the whole-process time of ``hermesctl status``.

* round trip: ``--requests`` sequential ``status`` calls on one connection, p50/p99;
* throughput: 1, 8 and 32 client *processes* (each its own connection, calling
  ``status`` in a loop for ``--seconds``), requests per second in total;
* ``hermesctl status``: the console script run as a new process, p50/p95.

Usage::

    .venv/bin/python bench/bench_control.py [--requests 2000] [--seconds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import daemon, machine, summary  # noqa: E402
from client.connection import Connection  # noqa: E402


def round_trips(runtime: Path, count: int) -> list[float]:
    """Seconds of ``count`` sequential ``status`` calls on one connection."""
    conn = Connection(runtime, timeout=30)
    conn.call("status")
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        conn.call("status")
        times.append(time.monotonic() - t0)
    conn.close()
    return times


def _client(runtime: str, start: float, seconds: float, out) -> None:
    conn = Connection(runtime, timeout=30)
    conn.call("status")
    while time.time() < start:
        time.sleep(0.001)
    done, end = 0, start + seconds
    while time.time() < end:
        conn.call("status")
        done += 1
    out.put(done)


def throughput(runtime: Path, clients: int, seconds: float) -> float:
    """Requests per second of ``clients`` processes calling ``status`` for ``seconds``."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start = time.time() + 1.0 + clients * 0.05  # every client connected before the clock starts
    procs = [ctx.Process(target=_client, args=(str(runtime), start, seconds, out)) for _ in range(clients)]
    for proc in procs:
        proc.start()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for proc in procs:
        proc.join(30)
    return total / seconds


def hermesctl_argv() -> list[str]:
    """``hermesctl status``: the console script beside this Python, else ``python -m client status``.
    Raises ``RuntimeError`` when the script predates the entry point ``client:main`` (then
    it would measure the slow path; ``pip install -e .`` writes it anew)."""
    exe = shutil.which("hermesctl", path=str(Path(sys.executable).parent))
    if exe and "from client import main" not in Path(exe).read_text(errors="replace"):
        raise RuntimeError(f"{exe} is an old console script (not client:main): run `{sys.executable} -m pip "
                           "install -e .` in the checkout first")
    return [exe, "status"] if exe else [sys.executable, "-m", "client", "status"]


def ctl_status(d, runs: int) -> list[float]:
    """Seconds of ``hermesctl status`` as a whole new process, ``runs`` times."""
    argv = hermesctl_argv()
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(argv, env=d.env, cwd=str(d.work), capture_output=True, check=True)
        times.append(time.monotonic() - t0)
    return times


def run(requests: int, seconds: float, runs: int = 15) -> dict:
    """Every figure of this benchmark."""
    with daemon() as d:
        return {"round_trip": round_trips(d.runtime, requests),
                "rps": {n: throughput(d.runtime, n, seconds) for n in (1, 8, 32)},
                "hermesctl": ctl_status(d, runs)}


def report(results: dict) -> str:
    """The figures as text."""
    lines = ["control round trip (status)", machine(),
             f"  one connection:        {summary(results['round_trip'], 50, 99)}"]
    for n, rps in results["rps"].items():
        lines.append(f"  {n:>2} concurrent clients: {rps:,.0f} requests/s")
    lines.append(f"  hermesctl status:      {summary(results['hermesctl'], 50, 95)} (whole process)")
    return "\n".join(lines)


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.requests, args.seconds)
    print(json.dumps(results) if args.json else report(results))


if __name__ == "__main__":
    main()
