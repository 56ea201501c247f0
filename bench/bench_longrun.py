"""A daemon that runs for months: state growth with and without retention, lists at
100,000 jobs, and many sleeping children.

* **State growth.**  ``--prompts`` scripted prompts (no model, no delay: the
  daemon's own cost per prompt) run as ``--chunks`` batches one after the other
  (as nightly cron batches would), 16 workers, warm start; after each batch the
  size of ``HERMES_HOME`` (``state.db`` with its WAL, and ``jobs/``) is printed,
  once without a retention policy and once with ``retention.max_jobs`` (every
  second).  The batches' own output (``--output_dir``) is the user's data, not
  the daemon's state, and is not counted.  Goal: flat after warm-up with a policy.
* **Lists at scale.**  ``--jobs`` finished jobs (and three events each) are
  written straight into ``state.db`` of a running daemon; then the latency of
  ``status``, ``ps`` (running and queued), the newest ``ps --all`` page
  (1,000 jobs) and of paging through all of them.
* **Many sleeping children.**  ``--children`` scripted children that sleep,
  started warm: the daemon's RSS, each child's USS (psutil, memory not shared
  with any other process) and the ``status`` round trip while they run.

Usage::

    .venv/bin/python bench/bench_longrun.py [--prompts 2000] [--chunks 10] [--jobs 100000]
        [--children 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_batch import dataset, one_run  # noqa: E402
from bench.common import Timer, daemon, machine, mean, ms, pct, summary, wait_for  # noqa: E402
from client.connection import Connection  # noqa: E402

MB = 2**20
KEEP_JOBS = 1000
"""``retention.max_jobs`` of the run with a policy."""


def state_bytes(home: Path) -> int:
    """Bytes of ``HERMES_HOME``: the state database (with WAL) and every job folder."""
    return sum(p.stat().st_size for p in home.rglob("*") if p.is_file())


def growth(prompts: int, chunks: int, retention: bool) -> list[dict]:
    """State size after each of ``chunks`` batches of ``prompts / chunks`` prompts."""
    config: dict = {"batch": {"max_turns": 2}}
    if retention:
        config["retention"] = {"max_jobs": KEEP_JOBS, "interval_seconds": 1, "batch_size": 500}
    rows = []
    with daemon(config, warm=True) as d:
        data = dataset(d.base / "prompts.jsonl", prompts // chunks, 1, 0.0)
        done = 0
        for i in range(chunks):
            result = one_run(d, data, 16, f"night{i}")
            done += prompts // chunks
            if retention:  # let the policy's next pass (every second) run, as time would
                time.sleep(2.5)
            jobs = d.call("status")["jobs"]
            rows.append({"prompts": done, "bytes": state_bytes(d.home), "jobs": sum(jobs.values()),
                         "wall": result["wall"]})
    return rows


def fill(home: Path, jobs: int) -> None:
    """Write ``jobs`` finished delegations and three events each into ``state.db``."""
    db = sqlite3.connect(home / "state.db", timeout=30)
    with db:
        db.executemany("INSERT INTO jobs (id, kind, status, goal, dispatched_at, completed_at, toolsets, trace) "
                       "VALUES (?, 'delegation', 'completed', ?, ?, ?, '[\"terminal\"]', '[]')",
                       ((f"deleg_{i:012x}", f"bench goal {i}", f"2026-01-01T00:00:00.{i % 1000:03d}Z",
                         "2026-01-01T00:00:01.000Z") for i in range(jobs)))
        db.executemany("INSERT INTO events (type, time, job, data) VALUES (?, '2026-01-01T00:00:00.000Z', ?, '{}')",
                       ((etype, f"deleg_{i:012x}") for i in range(jobs)
                        for etype in ("job.queued", "job.state", "job.state")))
    db.close()


def timed(conn: Connection, runs: int, op: str, **args) -> list[float]:
    """Seconds of ``runs`` sequential calls."""
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        conn.call(op, **args)
        times.append(time.monotonic() - t0)
    return times


def lists(jobs: int, runs: int = 200) -> dict:
    """Latency of status and ps with ``jobs`` jobs in the database."""
    with daemon() as d:
        with Timer() as t:
            fill(d.home, jobs)
        conn = Connection(d.runtime, timeout=120)
        try:
            out = {"fill": t.seconds, "status": timed(conn, runs, "status"), "ps": timed(conn, runs, "ps"),
                   "ps_page": timed(conn, max(10, runs // 10), "ps", all=True, order="newest", limit=1000)}
            with Timer() as t:
                listed = sum(1 for _ in conn.jobs(all=True, order="newest"))
            out.update(all_seconds=t.seconds, listed=listed)
        finally:
            conn.close()
    return out


def children(count: int, runs: int = 500) -> dict:
    """Daemon RSS, child USS and status latency with ``count`` sleeping children."""
    config = {"supervisor": {"max_children": count}, "delegation": {"max_concurrent_children": count}}
    with daemon(config, warm=True) as d:
        idle = psutil.Process(d.proc.pid).memory_info().rss / MB
        conn = Connection(d.runtime, timeout=60)
        try:
            with Timer() as t:
                jobs = [conn.call("delegate", goal=f"sleeper {i}", toolsets=[], cwd=str(d.work),
                                  script=[{"text": "zzz", "sleep": 600}])["id"] for i in range(count)]
                wait_for(lambda: conn.call("status")["jobs"].get("running", 0) >= count, 600, 0.5,
                         "every child running")
            busy = psutil.Process(d.proc.pid).memory_info().rss / MB
            uss = []
            for job in jobs:
                try:
                    uss.append(psutil.Process(conn.call("job", id=job)["pid"]).memory_full_info().uss / MB)
                except psutil.Error:
                    pass
            status = timed(conn, runs, "status")
        finally:
            conn.close()
    return {"count": count, "start_seconds": t.seconds, "idle": idle, "busy": busy, "uss": uss, "status": status}


def run(prompts: int, chunks: int, jobs: int, count: int) -> dict:
    """Every part; see the module doc."""
    return {"growth": {"none": growth(prompts, chunks, False), "retention": growth(prompts, chunks, True)},
            "lists": lists(jobs), "children": children(count), "prompts": prompts, "jobs": jobs}


def report(results: dict) -> str:
    """The figures as text."""
    lines = [f"long run: state after {results['prompts']:,} scripted prompts, lists at {results['jobs']:,} jobs, "
             f"{results['children']['count']} sleeping children", machine(),
             f"  state size of HERMES_HOME   without policy   with retention.max_jobs {KEEP_JOBS}"]
    for plain, kept in zip(results["growth"]["none"], results["growth"]["retention"]):
        lines.append(f"  after {plain['prompts']:>7,} prompts   {plain['bytes'] / MB:>8.1f} MiB "
                     f"({plain['jobs']:>6,} jobs)   {kept['bytes'] / MB:>8.1f} MiB ({kept['jobs']:>6,} jobs)")
    per = results["growth"]["none"][-1]
    lines.append(f"  without a policy: {per['bytes'] / max(1, per['prompts']) / 1024:.1f} KiB per prompt")
    li = results["lists"]
    lines += [f"  {results['jobs']:,} jobs written in {li['fill']:.1f}s",
              f"  status:                 {summary(li['status'], 50, 99)}",
              f"  ps (running, queued):   {summary(li['ps'], 50, 99)}",
              f"  ps --all, newest page:  {summary(li['ps_page'], 50, 99)}",
              f"  ps --all, every page:   {li['all_seconds']:.2f}s for {li['listed']:,} jobs"]
    ch = results["children"]
    lines += [f"  {ch['count']} sleeping children (warm) started and running in {ch['start_seconds']:.1f}s",
              f"  daemon RSS: {ch['idle']:.1f} MiB idle, {ch['busy']:.1f} MiB with them",
              f"  child USS:  mean {mean(ch['uss']):.1f} MiB, p95 {pct(ch['uss'], 95):.1f} MiB "
              f"(n={len(ch['uss'])}), total {sum(ch['uss']):.0f} MiB",
              f"  status while they run: {summary(ch['status'], 50, 99)}; max {ms(max(ch['status']))}"]
    return "\n".join(lines)


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=2000, help="20000 is the issue's figure (about 15 min per "
                        "run on a quiet 2-core machine); the default keeps the run short")
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--children", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.prompts, args.chunks, args.jobs, args.children)
    print(json.dumps(results) if args.json else report(results))


if __name__ == "__main__":
    main()
