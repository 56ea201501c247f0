"""Event latency and fan-out.

* latency, child completion → subscriber: a subscriber notes when each job's
  ``job.state completed`` event arrives, against the event's own ``time`` (the
  daemon's transition on receiving ``child.result``, before its fsynced commit
  and publication; milliseconds), and against the wall-clock time its last
  tool call wrote (``date +%s.%N``; this adds the tool's return and the
  child's last scripted turn).  Jobs run one at a time.
* fan-out: 50 subscribers (threads of one process, each its own
  ``Connection.follow``), one of them slow (it sleeps ``--slow-ms`` per
  event), while children produce a burst of progress events.  Lost and
  duplicated events per subscriber (against ``events_since``), how long the slow
  one needs to catch up, and ``status`` round trips meanwhile (the daemon is
  never held up by a slow subscriber).

Usage::

    .venv/bin/python bench/bench_events.py [--jobs 30] [--subscribers 50] [--children 6]
        [--steps 120] [--slow-ms 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import daemon, machine, summary  # noqa: E402
from hermesd import clock, protocol  # noqa: E402
from hermesd.jobs import TERMINAL  # noqa: E402


def completion_latency(d, jobs: int) -> tuple[list[float], list[float]]:
    """Seconds from a child's last action, and from the daemon's transition (the
    event's ``time``, in ms), to the completion event at a subscriber."""
    conn = d.conn(timeout=60)
    sub = conn.subscribe()
    time.sleep(0.3)
    stamp = d.work / "done_at"
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": f"date +%s.%N > {stamp}"}}]},
              {"text": "done"}]
    times, transitions = [], []
    for i in range(jobs):
        job = conn.call("delegate", goal=f"latency {i}", cwd=str(d.work), toolsets=["terminal"], script=script)["id"]
        while True:
            assert sub.poll(60_000), "no event within 60 s"
            event = protocol.unpackb(sub.recv_multipart()[1])
            if event["job"] == job and event["type"] == "job.state" and event["data"]["status"] == "completed":
                now = time.time()
                times.append(now - float(stamp.read_text()))
                transitions.append(now - clock.parse_iso(event["time"]).timestamp())
                break
    sub.close()
    conn.close()
    return times, transitions


class Subscriber(threading.Thread):
    """Follows every event after ``since`` (sleeping ``delay`` seconds on each) up to the end mark."""

    def __init__(self, d, since: int, delay: float):
        super().__init__(daemon=True)
        self.d, self.since, self.delay = d, since, delay
        self.seqs: list[int] = []
        self.caught_up_at: float | None = None

    def run(self) -> None:
        conn = self.d.conn(timeout=60)
        for event in conn.follow(self.since, idle=0.2):
            self.seqs.append(event["seq"])
            if self.delay:
                time.sleep(self.delay)
            if event["type"] == "daemon.reloaded":
                self.caught_up_at = time.monotonic()
                break
        conn.close()


def fan_out(d, subscribers: int, children: int, steps: int, slow_ms: float) -> dict:
    """Lost/duplicated events per subscriber, the slow one's catch-up, ``status`` meanwhile."""
    since = d.call("events_since", since=0, limit=1)["last_seq"]
    subs = [Subscriber(d, since, slow_ms / 1000 if i == 0 else 0.0) for i in range(subscribers)]
    for sub in subs:
        sub.start()
    time.sleep(1.0)
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "true"}}]}] * steps + [{"text": "done"}]
    started = time.monotonic()
    jobs = [d.delegate(f"burst {i}", toolsets=["terminal"], script=script)["id"] for i in range(children)]
    conn = d.conn()
    rtts = []
    while not all(d.call("job", id=j)["status"] in TERMINAL for j in jobs):
        t0 = time.monotonic()
        conn.call("status")
        rtts.append(time.monotonic() - t0)
        time.sleep(0.01)
    produced_in = time.monotonic() - started
    d.call("reload")  # one more event (daemon.reloaded): the end mark every subscriber waits for
    last = d.call("events_since", since=0, limit=1)["last_seq"]
    expected = [e["seq"] for e in d.conn().follow(since, follow=False)]
    assert expected[-1] == last
    for sub in subs:
        sub.join(600)
    fast = [s for s in subs[1:] if s.caught_up_at]
    return {
        "events": len(expected), "produced_seconds": produced_in,
        "lost": [len(set(expected) - set(s.seqs)) for s in subs],
        "duplicated": [len(s.seqs) - len(set(s.seqs)) for s in subs],
        "slow_caught_up_after": (subs[0].caught_up_at or float("nan")) - started,
        "fast_caught_up_after": max(s.caught_up_at for s in fast) - started if fast else float("nan"),
        "status_rtt": rtts,
    }


def run(jobs: int, subscribers: int, children: int, steps: int, slow_ms: float) -> dict:
    """Every figure of this benchmark."""
    with daemon({"delegation": {"max_turns": 10_000}}) as d:
        return {"latency": completion_latency(d, jobs), "fan_out": fan_out(d, subscribers, children, steps, slow_ms)}


def report(results: dict, subscribers: int, slow_ms: float) -> str:
    """The figures as text."""
    f = results["fan_out"]
    return "\n".join([
        "events", machine(),
        f"  completion event, daemon transition -> subscriber: {summary(results['latency'][1], 50, 95)}"
        " (event time has ms resolution)",
        f"  child's last command -> subscriber: {summary(results['latency'][0], 50, 95)}"
        " (includes the tool's return and the child's last turn)",
        f"  fan-out: {f['events']} events in {f['produced_seconds']:.1f}s to {subscribers} subscribers "
        f"(one sleeping {slow_ms:g} ms per event)",
        f"    lost: {sum(f['lost'])} (max per subscriber {max(f['lost'])}), duplicated: {sum(f['duplicated'])}",
        f"    fast subscribers caught up {f['fast_caught_up_after']:.1f}s after the burst began, "
        f"the slow one {f['slow_caught_up_after']:.1f}s",
        f"    status round trip during the burst: {summary(f['status_rtt'], 50, 99)}",
    ])


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--children", type=int, default=6)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--slow-ms", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.jobs, args.subscribers, args.children, args.steps, args.slow_ms)
    print(json.dumps(results) if args.json else report(results, args.subscribers, args.slow_ms))


if __name__ == "__main__":
    main()
