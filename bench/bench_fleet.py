"""Fleet: hundreds of children waiting at once on a slow model — their memory, the daemon's answers.

For each SDK (``anthropic``, ``openai-compat``: the fake servers of ``tests/fakes``, which
answer after ``--delay`` seconds), one batch of ``--children`` one-call prompts with as
many workers, in the default configuration (``start_method: forkserver``: items start
warm as the zygote's spares arrive), ``rate_limits`` letting every call out at once
(``max_concurrent``).  Once every child waits in its request (or the first answer is
due): each child's proportional set size (PSS: shared pages divided among the sharers),
and its private dirty memory, from ``/proc/PID/smaps_rollup``; the zygote's PSS; the sum
and the figure per child with the zygote's share.  Throughout, a second connection asks
``status`` every ``--interval`` seconds: its round trips and the requests refused
(``capacity_reached``, ``shutting_down``, ``timeout``).  At the end: prompts completed
and failed.  Goals: all complete, PSS per child ≤ 12 MiB, ``status`` p99 < 50 ms, none
refused.  Usage::

    .venv/bin/python bench/bench_fleet.py [--children 256] [--delay 60] [--interval 0.05]
        [--sdks anthropic,openai-compat] [--json]
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line as bench_command_line  # noqa: E402
from bench.common import daemon, machine, mean, pct, wait_for  # noqa: E402
from client.connection import ClientError  # noqa: E402
from hermesd.contract.states import TERMINAL  # noqa: E402
from hermesd.protocol import ProtocolError  # noqa: E402
from hermesd.warm.wire import MARK_ENV  # noqa: E402
from tests.chaos.helpers import proc_env, zygote_pids  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.harness import command_line  # noqa: E402

MiB = 1024  # smaps_rollup counts in KiB
GOALS = {"pss_per_child_mib": 12.0, "status_p99_ms": 50.0}
REFUSED = ("capacity_reached", "shutting_down", "timeout")
"""Error codes that mean a request was refused or dropped, not answered."""
SDKS = {"anthropic": (FakeAnthropic, "", "claude-bench"), "openai-compat": (FakeOpenAI, "/v1", "fake-model")}
"""Provider name → its fake server, the path added to the server's URL, the model name."""


def rollup(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup``'s fields in KiB (``Pss``, ``Private_Dirty``…); ``{}`` when gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return {p[0][:-1]: int(p[1]) for p in (line.split() for line in fh) if len(p) == 3 and p[1].isdigit()}
    except OSError:
        return {}


class StatusProbe(threading.Thread):
    """Asks ``status`` every ``interval`` seconds on its own connection until :meth:`stop`:
    ``seconds`` (each round trip) and ``refused`` (requests refused or dropped)."""

    def __init__(self, d: Any, interval: float):
        super().__init__(name="status-probe", daemon=True)
        self.conn, self.interval = d.conn(timeout=10.0), interval
        self.seconds: list[float] = []
        self.refused = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            t0 = time.perf_counter()
            try:
                self.conn.call("status")
            except (ProtocolError, ClientError) as exc:
                if exc.code not in REFUSED:
                    raise
                self.refused += 1
                continue
            self.seconds.append(time.perf_counter() - t0)

    def stop(self) -> None:
        self.halt.set()
        self.join()


def fleet(sdk: str, children: int, delay: float, interval: float) -> dict[str, Any]:
    """One batch of ``children`` prompts, all waiting at once on ``sdk``'s fake; its figures."""
    fake, path, model = SDKS[sdk]
    with fake(delay=delay) as api:
        config = {"provider": sdk, "base_url": api.url + path, "model": model,
                  "supervisor": {"max_children": children}, "rate_limits": {sdk: {"max_concurrent": children}}}
        with daemon(config, warm=True) as d:
            data = d.base / "prompts.jsonl"
            data.write_text("".join(json.dumps({"prompt": f"wait {i:05d}"}) + "\n" for i in range(children)))
            probe = StatusProbe(d, interval)
            probe.start()
            try:
                started = time.monotonic()
                job = d.call("batch.run", dataset_file=str(data), run_name="fleet", batch_size=children,
                             num_workers=children, output_dir=str(d.base / "out"))["id"]
                wait_for(all_waiting(api, children, delay), delay + 600, 0.1, "every child in its model call")
                ramp = time.monotonic() - started
                time.sleep(1.0)  # the last ones past their request's first bytes
                memory = measure(d, len(api.requests))
                wait_for(lambda: d.call("job", id=job)["status"] in TERMINAL, delay + 600, 0.5, "the batch's end")
            finally:
                probe.stop()
            record = d.call("batch.status", id=job)
            starts = d.call("status")["start"].get("starts", {})
    progress = record.get("progress") or {}
    return {"sdk": sdk, "children": children, "delay": delay, "ramp_seconds": ramp, **memory,
            "status": record["status"], "done": progress.get("done", 0), "discarded": progress.get("discarded", 0),
            "failed": progress.get("failed", 0),
            "failures": record.get("failures") or [], "starts": starts,
            "status_ms": [s * 1000 for s in probe.seconds], "refused": probe.refused}


def all_waiting(api: Any, children: int, delay: float) -> Callable[[], bool]:
    """A condition: every child's request reached the fake ``api``, or its first answer is
    due within 2 s (the ramp was slower than the model: measure who waits then)."""
    first: list[float] = []

    def check() -> bool:
        if api.requests and not first:
            first.append(time.monotonic())
        return len(api.requests) >= children or bool(first and time.monotonic() - first[0] >= delay - 2)

    return check


def measure(d: Any, in_flight: int) -> dict[str, Any]:
    """PSS and private dirty memory (MiB) of every child of the daemon that runs a job (``warm``:
    forked by the zygote, its environment has ``HERMES_ZYGOTE``), and the zygote's PSS."""
    kids = [p.pid for p in psutil.Process(d.proc.pid).children() if command_line(p).startswith("hermes-child")]
    rolls = [(r, MARK_ENV in proc_env(pid)) for pid, r in ((pid, rollup(pid)) for pid in kids) if r]
    zygote = rollup(zygote_pids(d)[-1])
    return {"in_flight": in_flight, "measured": len(rolls), "load": os.getloadavg()[0],
            "pss": [r["Pss"] / MiB for r, _ in rolls], "private_dirty": [r["Private_Dirty"] / MiB for r, _ in rolls],
            "warm": [warm for _, warm in rolls], "zygote_pss": zygote.get("Pss", 0) / MiB}


def _mean_of(values: list[float], keep: list[bool], want: bool) -> str:
    chosen = [v for v, k in zip(values, keep) if k == want]
    return f"{mean(chosen):.2f}" if chosen else "-"


def run(children: int = 256, delay: float = 60.0, interval: float = 0.05,
        sdks: str = "anthropic,openai-compat") -> list[dict[str, Any]]:
    """One row per SDK (``sdks``: comma-separated names of :data:`SDKS`)."""
    return [fleet(s, children, delay, interval) for s in sdks.split(",") if s]


def report(rows: list[dict[str, Any]], args: object = None) -> str:
    """The figures as text, each against its goal."""
    lines = ["fleet: children waiting at once on a slow model (forkserver, one batch)", machine()]
    for r in rows:
        n = max(1, len(r["pss"]))
        total = sum(r["pss"])
        per_child = (total + r["zygote_pss"]) / n
        p99 = pct(r["status_ms"], 99) if r["status_ms"] else float("nan")
        lines += [
            f"  {r['sdk']}: {r['children']} children, model answers after {r['delay']:g}s; "
            f"{r['in_flight']} requests in flight after {r['ramp_seconds']:.1f}s, {r['measured']} children measured "
            f"(load average {r['load']:.2f}); starts {r['starts']}",
            f"    PSS: children {total:.1f} MiB in all + zygote {r['zygote_pss']:.1f} MiB = {per_child:.2f} MiB per child "
            f"(goal <= {GOALS['pss_per_child_mib']:g}); per warm child {_mean_of(r['pss'], r['warm'], True)} "
            f"({_mean_of(r['private_dirty'], r['warm'], True)} private dirty), per cold one "
            f"{_mean_of(r['pss'], r['warm'], False)} ({_mean_of(r['private_dirty'], r['warm'], False)})",
            f"    status round trip: p50 {pct(r['status_ms'], 50) if r['status_ms'] else float('nan'):.2f} ms, "
            f"p99 {p99:.2f} ms, max {max(r['status_ms'], default=float('nan')):.2f} ms (n={len(r['status_ms'])}, "
            f"goal p99 < {GOALS['status_p99_ms']:g} ms); refused {r['refused']}",
            f"    batch {r['status']}: {r['done'] + r['discarded']} of {r['children']} complete ({r['discarded']} of them "
            f"discarded by the output's filters), {r['failed']} failed"
            + (f" ({r['failures']})" if r["failures"] else ""),
        ]
        met = (r["done"] + r["discarded"] == r["children"] and not r["failed"] and per_child <= GOALS["pss_per_child_mib"]
               and p99 < GOALS["status_p99_ms"] and not r["refused"])
        lines.append(f"    goals (all complete, PSS per child, status p99, none refused): {'met' if met else 'NOT met'}")
    return "\n".join(lines)


if __name__ == "__main__":
    bench_command_line(__doc__, run, report, children=256, delay=60.0, interval=0.05, sdks="anthropic,openai-compat")
