"""What every benchmark needs: a throw-away daemon, percentiles, the machine's load.

Benchmarks print figures; they assert nothing about timings.  Each runs real
processes (``tests.harness.DaemonProc``: a daemon in a temporary directory,
cleaned up whatever happens).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.chaos.helpers import forkserver, warm_on_start  # noqa: E402
from tests.harness import DaemonProc, wait_for  # noqa: E402

__all__ = ["daemon", "pct", "machine", "ms", "wait_for", "Timer", "ROOT", "command_line", "ideal_seconds", "timed_process"]


@contextlib.contextmanager
def daemon(config: dict[str, Any] | None = None, env: dict[str, str] | None = None,
           warm: bool = False) -> Iterator[DaemonProc]:
    """A running daemon in a temporary directory (``warm``: forkserver, zygote ready)."""
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        proc = DaemonProc(Path(tmp), forkserver(config) if warm else config, env)
        try:
            (warm_on_start(proc) if warm else proc).start(120.0)  # a loaded machine starts slowly
            yield proc
        finally:
            proc.cleanup()


def ideal_seconds(prompts: int, seconds_each: float, workers: int) -> float:
    """The wall time of a batch on a supervisor that costs nothing: ``prompts`` of
    ``seconds_each`` seconds run in rounds of ``workers``, and the last round may be
    partial (1,000 prompts of 1 s on 16 workers: 63 rounds, 63 s — not 62.5 s, which no
    scheduler can reach: for the last second half the workers have nothing to run)."""
    return math.ceil(prompts / workers) * seconds_each


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values`` (nearest rank)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def ms(seconds: float) -> str:
    """Seconds as milliseconds with two decimals."""
    return f"{seconds * 1000:.2f} ms"


def summary(values: list[float], *ps: float) -> str:
    """``p50 … p95 …`` of ``values`` (seconds) in ms, with the count."""
    return ", ".join(f"p{p:g} {ms(pct(values, p))}" for p in ps) + f" (n={len(values)})"


def machine() -> str:
    """One line about where and when the figures were taken, load included."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} · {platform.node()} · {os.cpu_count()} cores · "
            f"Python {platform.python_version()} · load average {load}")


def timed_process(argv: list[str], env: dict[str, str] | None = None,
                  cwd: str | None = None) -> tuple[float, float, int, str]:
    """Run ``argv`` to its end as a new process (stdout discarded): its wall-clock seconds, its
    CPU seconds (user + system, from ``wait4``), its exit status and its stderr."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    return seconds, usage.ru_utime + usage.ru_stime, proc.returncode, err.decode(errors="replace")


def mean(values: list[float]) -> float:
    """Arithmetic mean (0 for nothing)."""
    return statistics.fmean(values) if values else 0.0


class Timer:
    """``with Timer() as t: …`` then ``t.seconds``."""

    def __enter__(self) -> "Timer":
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self.start


def command_line(doc: str, measure: Callable[..., Any], show: Callable[[Any, argparse.Namespace], str],
                 **defaults: Any) -> None:
    """The command line of a benchmark module: an option ``--NAME`` per keyword of
    ``defaults`` (of the default's type) and ``--json``; prints ``show(results, args)``,
    or with ``--json`` the raw ``results = measure(**options)``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure(**{name: getattr(args, name) for name in defaults})
    print(json.dumps(results) if args.json else show(results, args))
