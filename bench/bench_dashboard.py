"""The dashboard: isolated from the daemon, and quick with many jobs kept (issue 43).

* isolation: a 1,000-prompt batch (scripted provider) run three times on one daemon: once to warm
  it up (not measured: a daemon's memory grows over its first ~1,000 jobs, ``bench_rss_growth.py``),
  once with nobody watching and once with ``--browsers`` (5) headless Chromiums on its batch page (Debian's
  ``chromium``, Selenium; ``--browsers-kind http`` instead has as many plain clients do what the
  page's script does: hold ``/live`` and fetch the batch page's live part on each change).  During
  each run a separate connection times ``status`` round trips every 50 ms and the daemon's RSS is
  read every 0.5 s; printed: p50/p99 of the round trips, mean and max RSS, the batch's wall time,
  and the ratio of the watched run to the unwatched one (the goal: within 10 %).
* page loads: a daemon with ``--jobs`` (10,000) finished jobs kept (written into its state.db
  before it starts, as a long-lived daemon has them), the dashboard loaded with them; each page
  fetched ``--loads`` times in turn; p50/p95 per page (the goal: under 200 ms at p95).

Usage::

    .venv/bin/python bench/bench_dashboard.py [--prompts 1000] [--browsers 5] [--browsers-kind chromium|http]
                                              [--jobs 10000] [--loads 200] [--only isolation|pages]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from bench.common import daemon, machine, mean, pct, summary, wait_for  # noqa: E402
from client.connection import Connection  # noqa: E402
from tests.browser import Dashboard, chromium  # noqa: E402

ITEM = [{"thinking": "I answer.", "tool_calls": [{"name": "terminal", "input": {"command": "echo hi"}}]},
        {"text": "done"}]


class Probe(threading.Thread):
    """``status`` round trips every 50 ms and the daemon's RSS every 0.5 s, until stopped."""

    def __init__(self, runtime: Path, pid: int):
        super().__init__(daemon=True)
        self.runtime, self.proc = runtime, psutil.Process(pid)
        self.trips: list[float] = []
        self.rss: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        conn = Connection(self.runtime, timeout=30)
        last_rss = 0.0
        while not self.halt.is_set():
            began = time.perf_counter()
            conn.call("status")
            self.trips.append(time.perf_counter() - began)
            if time.monotonic() - last_rss >= 0.5:
                last_rss = time.monotonic()
                self.rss.append(self.proc.memory_info().rss)
            self.halt.wait(0.05)
        conn.close()


def http_watcher(dash: Dashboard, batch: str, halt: threading.Event) -> None:
    """What the batch page's script does, without a browser: hold /live, fetch the part on each change."""
    request = urllib.request.Request(dash.base + "/live", headers={"Authorization": f"Bearer {dash.token}"})
    with urllib.request.urlopen(request, timeout=60) as stream:
        event = None
        for raw in stream:
            if halt.is_set():
                return
            line = raw.decode().strip()
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "refresh" and f"batch:{batch}" in line:
                dash.http(f"/batch/{batch}/part")


def run_batch(d: Any, dataset: Path, name: str, watchers: int, kind: str) -> dict[str, Any]:
    """One batch run with ``watchers`` watching its page; the probe's figures."""
    dash = Dashboard(d) if watchers else None
    browsers, threads, halt = [], [], threading.Event()
    try:
        d.call("pause")  # the batch waits while the watchers open its page
        record = d.call("batch.run", dataset_file=str(dataset), run_name=name, batch_size=100, num_workers=8,
                        output_dir=str(d.base / "out"))
        if dash is not None:
            for _ in range(watchers):
                if kind == "chromium":
                    browser = chromium()
                    browser.get(dash.url.replace("/?token=", f"/batch/{record['id']}?token="))
                    browsers.append(browser)
                else:
                    thread = threading.Thread(target=http_watcher, args=(dash, record["id"], halt), daemon=True)
                    thread.start()
                    threads.append(thread)
            wait_for(lambda: all("batch-state" in b.page_source for b in browsers), 120, 0.2, "the pages to load")
        probe = Probe(d.runtime, d.proc.pid)
        began = time.monotonic()
        probe.start()
        d.call("resume")
        d.wait_job(record["id"], timeout=3600)
        wall = time.monotonic() - began
        probe.halt.set()
        probe.join(10)
        return {"trips": probe.trips, "rss": probe.rss, "wall": wall}
    finally:
        halt.set()
        for browser in browsers:
            browser.quit()
        if dash is not None:
            dash.stop()


def isolation(args: argparse.Namespace) -> None:
    """The batch without watchers, then with them; the figures and their ratios."""
    with daemon({"provider": "scripted", "supervisor": {"max_children": 16}}) as d:
        dataset = d.base / "prompts.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": f"prompt {i}", "script": ITEM}) + "\n"
                                   for i in range(args.prompts)))
        runs = {}
        # a daemon's RSS grows over its first ~1,000 jobs (SQLite's page cache, a full ps page:
        # bench_rss_growth.py): a first batch, not measured, so both runs compared see it warm
        run_batch(d, dataset, "warmup", 0, args.browsers_kind)
        for label, watchers in (("nobody watching", 0), (f"{args.browsers} {args.browsers_kind} watching", args.browsers)):
            runs[label] = got = run_batch(d, dataset, f"bench{watchers}", watchers, args.browsers_kind)
            print(f"{label}: status round trip {summary(got['trips'], 50, 99)}; daemon RSS mean "
                  f"{mean(got['rss']) / 2**20:.1f} MiB, max {max(got['rss']) / 2**20:.1f} MiB; batch {got['wall']:.1f} s",
                  flush=True)
        quiet, watched = runs.values()
        for what, a, b in (("status p50", pct(quiet["trips"], 50), pct(watched["trips"], 50)),
                           ("status p99", pct(quiet["trips"], 99), pct(watched["trips"], 99)),
                           ("RSS mean", mean(quiet["rss"]), mean(watched["rss"])),
                           ("RSS max", max(quiet["rss"]), max(watched["rss"]))):
            print(f"  {what}: watched / unwatched = {b / a:.3f} (goal: at most 1.10)")


def insert_jobs(d: Any, n: int) -> None:
    """``n`` finished delegations written into the stopped daemon's state.db."""
    db = sqlite3.connect(d.home / "state.db", timeout=10)
    with db:
        db.executemany("INSERT INTO jobs (id, kind, status, goal, dispatched_at, completed_at, api_calls, tokens_in, "
                       "tokens_out) VALUES (?, 'delegation', 'completed', ?, ?, ?, 3, 1200, 300)",
                       [(f"deleg_kept{i:06d}", f"kept job number {i}: summarise part {i} of the report",
                         f"2026-01-{1 + i // 86400 % 28:02d}T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                         "2026-01-28T00:00:00Z") for i in range(n)])
    db.close()


def pages(args: argparse.Namespace) -> None:
    """Page loads with ``--jobs`` finished jobs kept."""
    with daemon({"provider": "scripted"}) as d:
        job = d.delegate("a real job", script=ITEM, toolsets=["terminal"])["id"]
        d.wait_job(job)
        d.stop()
        insert_jobs(d, args.jobs)
        d.start(120)
        dash = Dashboard(d)
        try:
            wait_for(lambda: 'id="job-deleg_kept000000"' in dash.http("/?q=deleg_kept000000")[1], 300, 0.5,
                     "the dashboard to load every job")
            for path in ("/", "/?state=completed", "/?q=part+42", f"/job/{job}", "/approvals", "/bill", "/batches",
                         "/kanban", "/metrics"):
                times = []
                for _ in range(args.loads):
                    began = time.perf_counter()
                    status, _ = dash.http(path)
                    times.append(time.perf_counter() - began)
                    assert status == 200, (path, status)
                print(f"  GET {path}: {summary(times, 50, 95)} (goal: p95 under 200 ms)", flush=True)
        finally:
            dash.stop()


def main() -> None:
    """Run what ``--only`` says (both by default); see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--browsers", type=int, default=5)
    parser.add_argument("--browsers-kind", choices=("chromium", "http"), default="chromium")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=200)
    parser.add_argument("--only", choices=("isolation", "pages"))
    args = parser.parse_args()
    print(machine(), flush=True)
    if args.only in (None, "isolation"):
        print(f"isolation: a {args.prompts}-prompt batch, nobody watching, then {args.browsers} watching", flush=True)
        isolation(args)
    if args.only in (None, "pages"):
        print(f"page loads with {args.jobs} finished jobs kept", flush=True)
        pages(args)


if __name__ == "__main__":
    main()
