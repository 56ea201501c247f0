"""Memory limit without a cgroup: how far beyond it a fast allocator gets before the watch kills it.

A job with ``memory_limit_mb`` (default 1,536, as in issue 45) and ``child_limits.cgroup: false``
(the watch, :class:`hermesd.system.limits.MemoryWatch`, holds the limit) runs one terminal
command: a Python loop that allocates ``--rate-mb`` MB/s (default 200) in 4 MiB chunks, each
written (so resident), and after each chunk writes its resident set to a file.  The watch kills
the command (the job goes on: the tool call fails with ``killed: memory limit …``); the figure is
the job's peak — the agent's PSS when the command started plus the command's largest resident
set it recorded — against the limit (goal: under 10 % beyond it).  Each of ``--runs`` runs is a
fresh job on one daemon.  Usage::

    .venv/bin/python bench/bench_memory_limit.py [--limit-mb 1536] [--rate-mb 200] [--runs 5] [--json]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine, wait_for  # noqa: E402

MIB = 2**20
CHUNK_MIB = 4

HOG = """import os, sys, time
rate, out = float(sys.argv[1]) * 1e6, open(sys.argv[2], "w")
held, start = [], time.monotonic()
page = os.sysconf("SC_PAGE_SIZE")
while True:
    held.append(bytearray(b"\\1") * ({chunk} << 20))
    rss = int(open("/proc/self/statm").read().split()[1]) * page
    out.write(f"{{time.monotonic() - start:.4f}} {{rss}}\\n"); out.flush()
    time.sleep(max(0.0, start + len(held) * ({chunk} << 20) / rate - time.monotonic()))
""".format(chunk=CHUNK_MIB)


def one(d, limit_mb: int, rate_mb: float, n: int) -> dict:
    """One job whose command allocates ``rate_mb`` MB/s until it is killed: its figures."""
    (d.work / "hog.py").write_text(HOG)
    trace = d.work / f"hog-{n}.txt"
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": f"python3 hog.py {rate_mb} {trace.name}",
                                                             "timeout": 600}}]}, {"text": "done"}]
    job = d.delegate(f"hog {n}", toolsets=["terminal"], memory_limit_mb=limit_mb, script=script)["id"]
    wait_for(trace.exists, 120, 0.005, "the command to start")
    agent = psutil.Process(d.call("job", id=job)["pid"]).memory_full_info().pss
    record = d.wait_job(job, 600)
    trajectory = json.loads((d.home / "jobs" / job / "trajectory.json").read_text())
    result = next(str(m["content"]) for m in trajectory["messages"] if m["role"] == "tool")
    used = re.search(r"the command used ([\d,]+) MiB", result)
    lines = [line.split() for line in trace.read_text().splitlines() if line.strip()]
    seconds, peak = float(lines[-1][0]), max(int(rss) for _, rss in lines)
    first = int(lines[0][1])
    return {"status": record["status"], "killed": result.startswith("terminal: killed: memory limit"),
            "agent_mib": agent / MIB, "peak_mib": (agent + peak) / MIB,
            "rate_mb_s": (peak - first) / 1e6 / seconds if seconds > 0 else 0.0,
            "seen_mib": (agent / MIB + int(used.group(1).replace(",", ""))) if used else None,
            "over_pct": ((agent + peak) / (limit_mb * MIB) - 1) * 100}


def run(limit_mb: int, rate_mb: float, runs: int) -> dict:
    """``runs`` jobs on one daemon (watch only, no cgroup)."""
    with daemon({"child_limits": {"cgroup": False, "memory_mb": limit_mb}}) as d:
        return {"limit_mb": limit_mb, "rate_mb": rate_mb, "runs": [one(d, limit_mb, rate_mb, n) for n in range(runs)]}


def report(results: dict) -> str:
    """The figures as text."""
    lim = results["limit_mb"]
    lines = [f"memory limit held by the watch (issue 45): {results['rate_mb']:g} MB/s allocator, limit {lim:,} MiB",
             machine(),
             f"  {'run':>3} {'rate MB/s':>9} {'agent MiB':>9} {'peak MiB':>9} {'seen MiB':>9} {'over':>7}  outcome"]
    for n, r in enumerate(results["runs"]):
        seen = f"{r['seen_mib']:,.0f}" if r["seen_mib"] is not None else "-"
        outcome = ("command killed, job " + r["status"]) if r["killed"] else f"NOT killed by the watch, job {r['status']}"
        lines.append(f"  {n:>3} {r['rate_mb_s']:>9.0f} {r['agent_mib']:>9.1f} {r['peak_mib']:>9,.0f} {seen:>9} "
                     f"{r['over_pct']:>6.1f}%  {outcome}")
    worst = max((r["over_pct"] for r in results["runs"]), default=0.0)
    met = worst < 10 and all(r["killed"] and r["status"] == "completed" for r in results["runs"])
    lines.append(f"goal\n  {'met    ' if met else 'NOT met'}  peak beyond the limit < 10 %, the job goes on: "
                 f"worst {worst:.1f}% (peak: the agent's PSS + the command's largest RSS; seen: what the watch measured)")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, lambda results, args: report(results), limit_mb=1536, rate_mb=200.0, runs=5)
