"""Memory: daemon RSS idle and with 16 children; RSS, USS and PSS per child.

For each start method: the daemon's RSS a moment after start (idle), then with
``--children`` delegations running at once (each sleeps in its model call),
and per child its RSS (resident, shared pages counted in full), USS (pages only
it has) and PSS (shared pages divided among the sharers).  Warm children share
the zygote's pages copy-on-write, so their USS is what each really costs; the
zygote's own RSS is shown too.  Children run the scripted provider (no SDK
imported), then the anthropic provider against a fake server that never
answers (measured once every child waits in its request).  Usage::

    .venv/bin/python bench/bench_memory.py [--children 16] [--json]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine, mean, wait_for  # noqa: E402
from tests.chaos.helpers import zygote_pids  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402

MB = 2**20


def measure(children: int, warm: bool, api: FakeAnthropic | None) -> dict:
    """RSS of the daemon idle and busy, and of each child (MiB); with ``api`` the
    children use the anthropic provider and wait in their request to it."""
    config: dict = {"supervisor": {"max_children": children}}
    if api is not None:
        config.update(provider="anthropic", base_url=api.url)
    with daemon(config, {"ANTHROPIC_API_KEY": "bench"} if api else None, warm=warm) as d:
        time.sleep(2.0)
        idle = psutil.Process(d.proc.pid).memory_info().rss / MB
        jobs = [d.delegate(f"resident {i}", toolsets=[], script=[{"text": "zzz", "sleep": 120}])["id"]
                for i in range(children)]
        wait_for(lambda: all(d.call("job", id=j)["status"] == "running" for j in jobs), 120, 0.1, "children running")
        if api is not None:
            wait_for(lambda: len(api.requests) >= children, 300, 0.1, "every child in its model call")
        time.sleep(2.0)
        pids = [d.call("job", id=j)["pid"] for j in jobs]
        infos = [psutil.Process(pid).memory_full_info() for pid in pids]
        busy = psutil.Process(d.proc.pid).memory_info().rss / MB
        zygote = psutil.Process(zygote_pids(d)[-1]).memory_info().rss / MB if warm else None
        for job in jobs:
            d.call("cancel", id=job)
        return {"idle": idle, "busy": busy, "zygote": zygote, "rss": [i.rss / MB for i in infos],
                "uss": [i.uss / MB for i in infos], "pss": [i.pss / MB for i in infos]}


def run(children: int) -> dict:
    """Every row: each start method with each provider."""
    results = {}
    for method in ("spawn", "forkserver"):
        results[f"{method}, scripted"] = measure(children, method == "forkserver", None)
        with FakeAnthropic(delay=600) as api:
            results[f"{method}, anthropic"] = measure(children, method == "forkserver", api)
    return results


def report(results: dict, children: int) -> str:
    """The figures as text."""
    lines = ["memory (MiB)", machine(),
             f"  {'start, provider':<21} {'daemon idle':>11} {f'with {children}':>9} {'zygote':>7} "
             f"{'child RSS':>9} {'USS':>6} {'PSS':>6} {'sum of PSS':>10}"]
    for method, r in results.items():
        zygote = f"{r['zygote']:.1f}" if r["zygote"] is not None else "-"
        lines.append(f"  {method:<21} {r['idle']:>11.1f} {r['busy']:>9.1f} {zygote:>7} {mean(r['rss']):>9.1f} "
                     f"{mean(r['uss']):>6.1f} {mean(r['pss']):>6.1f} {sum(r['pss']):>10.1f}")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, lambda results, args: report(results, args.children), children=16)
