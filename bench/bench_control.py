"""Control round trip: ``status`` over one connection, throughput with concurrent
clients, and the whole-process time of ``hermesctl status``.

* round trip: ``--requests`` sequential ``status`` calls on one connection, p50/p99;
* throughput: 1, 8 and 32 client *processes* (each its own connection, calling
  ``status`` in a loop for ``--seconds``), requests per second in total;
* ``hermesctl status``: the console script run as a new process, p50/p95;
* the commands scripts call, each beside ``python -c pass``: ``--pairs`` pairs of whole
  processes (the floor, then the command, one pair after the other so both share the
  load), the median of each and their ratio, wall-clock and CPU time (user + system).
  ``status``, ``hello``, ``delegate --background`` (the queue paused, so no child runs
  while the clients are measured), ``ps`` (with the jobs this makes), ``result``,
  ``wait`` (an ended job), ``cancel`` (a new queued job each time), ``events --since``
  (the last 20), each in text and with ``--json``.  The goal is at most 1.5x.  The client's
  bytecode is written first (with ``PYTHONDONTWRITEBYTECODE`` each run would compile what changed).
  ``--instructions``: each command and the floor also run once under valgrind (callgrind), and
  the instructions each ran are compared: a ratio a loaded machine does not move (no system
  time, no waiting for the daemon).

Usage::

    .venv/bin/python bench/bench_control.py [--requests 2000] [--seconds 5] [--pairs 15] [--only-commands]
                                            [--instructions] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import daemon, machine, summary, timed_process  # noqa: E402
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


def hermesctl_argv(*args: str) -> list[str]:
    """``hermesctl ARGS`` (default ``status``): the console script beside this Python, else
    ``python -m client ARGS``.
    Raises ``RuntimeError`` when the script predates the entry point ``client:main`` (then
    it would measure the slow path; ``pip install -e .`` writes it anew)."""
    exe = shutil.which("hermesctl", path=str(Path(sys.executable).parent))
    if exe and "from client import main" not in Path(exe).read_text(errors="replace"):
        raise RuntimeError(f"{exe} is an old console script (not client:main): run `{sys.executable} -m pip "
                           "install -e .` in the checkout first")
    args = args or ("status",)
    return [exe, *args] if exe else [sys.executable, "-m", "client", *args]


def ctl_status(d, runs: int) -> list[float]:
    """Seconds of ``hermesctl status`` as a whole new process, ``runs`` times."""
    argv = hermesctl_argv()
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(argv, env=d.env, cwd=str(d.work), capture_output=True, check=True)
        times.append(time.monotonic() - t0)
    return times


GOAL_RATIO = 1.5
"""The goal of each command: its whole process at most this many times ``python -c pass``."""


def instructions(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> int:
    """How many instructions the process ``argv`` ran (user space, counted by valgrind's callgrind).
    Raises ``RuntimeError`` when it fails or valgrind is not installed."""
    if not shutil.which("valgrind"):
        raise RuntimeError("--instructions needs valgrind (apt-get install valgrind)")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], env=env, cwd=cwd,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    counted = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not counted:
        raise RuntimeError(f"{' '.join(argv)} under valgrind failed ({out.returncode}): {out.stderr[-500:]}")
    return int(counted.group(1))


def compile_client() -> None:
    """Write the bytecode of ``client/`` and ``hermesd/`` where it is missing or stale: with
    ``PYTHONDONTWRITEBYTECODE`` set, each command would otherwise compile anew every module changed
    since the last write, and that would be measured (``py_compile`` writes whatever it says)."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("client", "hermesd"):
        compileall.compile_dir(root / package, quiet=1)


def scripted_commands(d, pairs: int, count: bool = False) -> dict[str, dict[str, list[float]]]:
    """Each command scripts call beside ``python -c pass`` (see the module doc): per command,
    ``{"wall": [...], "cpu": [...], "floor_wall": [...], "floor_cpu": [...]}`` in seconds, one
    value per pair, and with ``count`` ``"instructions": [command's, floor's]``.  A command that
    exits otherwise than it should is an error."""
    compile_client()
    conn = Connection(d.runtime, timeout=30)
    done = conn.call("delegate", goal="ended", cwd=str(d.work))["id"]
    conn.call("wait", 60, id=done, timeout=50)
    conn.call("pause")
    queued = [conn.call("delegate", goal=f"to cancel {i}", cwd=str(d.work), background=True, queue=True)["id"]
              for i in range(2 * (pairs + 1) + 2)]

    def last_twenty() -> str:  # asked before each run: the events a run prints stay 20, not all since the first
        return str(max(0, conn.call("status")["last_seq"] - 20))

    commands: dict[str, Callable[[int], list[str]]] = {
        "status": lambda i: ["status"], "hello": lambda i: ["hello"],
        "delegate --background": lambda i: ["delegate", "--background", "--queue", f"bench {i}"],
        "ps": lambda i: ["ps"], "result": lambda i: ["result", done], "wait": lambda i: ["wait", done],
        "cancel": lambda i: ["cancel", queued[i]], "events --since": lambda i: ["events", "--since", last_twenty()]}
    out: dict[str, dict[str, list[float]]] = {}
    for name, args in commands.items():
        for as_json in (False, True):
            series: dict[str, list[float]] = {"wall": [], "cpu": [], "floor_wall": [], "floor_cpu": []}
            for i in range(pairs + 1):  # the first pair warms the page cache
                floor = timed_process([sys.executable, "-c", "pass"])
                argv = hermesctl_argv(*(["--json"] if as_json else []), *args(i + (pairs + 1 if as_json else 0)))
                seconds, cpu, code, err = timed_process(argv, d.env, str(d.work))
                if code != 0:
                    raise RuntimeError(f"{' '.join(argv[1:])} failed ({code}): {err[-500:]}")
                if i:
                    for key, value in (("wall", seconds), ("cpu", cpu), ("floor_wall", floor[0]),
                                       ("floor_cpu", floor[1])):
                        series[key].append(value)
            if count:
                argv = hermesctl_argv(*(["--json"] if as_json else []), *args(2 * (pairs + 1) + as_json))
                series["instructions"] = [instructions(argv, d.env, str(d.work)),
                                          instructions([sys.executable, "-c", "pass"])]
            out[name + (" --json" if as_json else "")] = series
    conn.close()
    return out


def run(requests: int, seconds: float, runs: int = 15, pairs: int = 15, only_commands: bool = False,
        count: bool = False) -> dict:
    """Every figure of this benchmark (``only_commands``: only :func:`scripted_commands`; ``count``:
    with instructions)."""
    with daemon() as d:
        if only_commands:
            return {"commands": scripted_commands(d, pairs, count)}
        return {"round_trip": round_trips(d.runtime, requests),
                "rps": {n: throughput(d.runtime, n, seconds) for n in (1, 8, 32)},
                "hermesctl": ctl_status(d, runs), "commands": scripted_commands(d, pairs, count)}


def commands_report(commands: dict[str, dict[str, list[float]]]) -> list[str]:
    """The lines of :func:`scripted_commands`' figures: medians, ratios, the goal met or not."""
    lines = [f"  commands scripts call, whole process beside python -c pass (median of {len(next(iter(commands.values()))['wall'])} pairs; goal <= {GOAL_RATIO:g}x)",
             f"    {'command':<28}{'wall':>9}{'floor':>9}{'ratio':>8}{'cpu':>9}{'floor':>9}{'ratio':>8}"
             + (f"{'instr':>9}{'floor':>8}{'ratio':>8}" if "instructions" in next(iter(commands.values())) else "")]
    for name, s in commands.items():
        wall, floor = statistics.median(s["wall"]), statistics.median(s["floor_wall"])
        cpu, floor_cpu = statistics.median(s["cpu"]), statistics.median(s["floor_cpu"])
        met = "met" if wall / floor <= GOAL_RATIO else "NOT met"
        counted = ""
        if "instructions" in s:
            ran, floor_ran = s["instructions"]
            counted = f"{ran / 1e6:>8.1f}M{floor_ran / 1e6:>7.1f}M{ran / floor_ran:>7.2f}x"
        lines.append(f"    {name:<28}{wall * 1e3:>7.1f}ms{floor * 1e3:>7.1f}ms{wall / floor:>7.2f}x"
                     f"{cpu * 1e3:>7.1f}ms{floor_cpu * 1e3:>7.1f}ms{cpu / floor_cpu:>7.2f}x{counted}  {met}")
    return lines


def report(results: dict) -> str:
    """The figures as text."""
    lines = ["control round trip (status)", machine()]
    if "round_trip" in results:
        lines.append(f"  one connection:        {summary(results['round_trip'], 50, 99)}")
        for n, rps in results["rps"].items():
            lines.append(f"  {n:>2} concurrent clients: {rps:,.0f} requests/s")
        lines.append(f"  hermesctl status:      {summary(results['hermesctl'], 50, 95)} (whole process)")
    return "\n".join(lines + commands_report(results["commands"]))


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--only-commands", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.requests, args.seconds, pairs=args.pairs, only_commands=args.only_commands,
                  count=args.instructions)
    print(json.dumps(results) if args.json else report(results))


if __name__ == "__main__":
    main()
