"""MCP servers: the time to a job's first MCP tool result, and what the server's start costs a job.

A warm daemon (forkserver, zygote ready) with ``mcp-server-time`` (stdio, a real server from
PyPI) runs ``--jobs`` delegations one after the other, each one scripted model call asking
``mcp__time__get_current_time`` and a final answer; as many again call the built-in
``list_files`` instead (the same job without an MCP server).  Each job starts its own server
(nothing is shared between jobs: a server is a process of the child that uses it).  Printed,
as median / p90 / max:

* **first MCP tool result**: from ``delegate`` to the job's end, less what the baseline job
  takes (the same script without a server): what using a stdio MCP server adds to a job;
* **server ready**: the child's own measure of the server's start and handshake and tool
  list (``mcp time: ready in …`` in the job's log);
* **call**: the tool call's wall time (the trace's ``seconds``);
* the end-to-end wall time of both kinds of job.

Usage::

    .venv/bin/python bench/bench_mcp.py [--jobs 20] [--json]
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine, summary  # noqa: E402

SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
MCP_SCRIPT = [{"tool_calls": [{"name": "mcp__time__get_current_time", "input": {"timezone": "UTC"}}]},
              {"text": "done"}]
BASE_SCRIPT = [{"tool_calls": [{"name": "list_files", "input": {}}]}, {"text": "done"}]
READY = re.compile(r"mcp time: ready in ([0-9.]+)s")


def one(d: Any, script: list[dict[str, Any]], toolsets: list[str]) -> tuple[float, dict[str, Any]]:
    """One delegation, waited for: its wall time from the request to its end, and its record."""
    began = time.monotonic()
    job = d.delegate("what time is it", script=script, toolsets=toolsets)["id"]
    row = d.wait_job(job, timeout=120)
    wall = time.monotonic() - began
    if row["status"] != "completed":
        raise SystemExit(f"job {job} ended {row['status']}: {row.get('error')}")
    return wall, d.call("result", id=job)


def measure(jobs: int) -> dict[str, Any]:
    """Run the jobs (see the module doc); the raw figures in seconds."""
    out: dict[str, Any] = {"jobs": jobs, "machine": machine(), "mcp_wall": [], "base_wall": [], "ready": [],
                           "call": []}
    with daemon({"mcp_servers": {"time": SERVER}}, warm=True) as d:
        one(d, BASE_SCRIPT, ["file"])  # the first child of a fresh daemon warms caches for both kinds
        for _ in range(jobs):
            wall, record = one(d, MCP_SCRIPT, ["mcp:time"])
            out["mcp_wall"].append(wall)
            out["call"].append(record["trace"][0]["seconds"])
            log = (d.home / "jobs" / record["id"] / "log").read_text(errors="replace")
            out["ready"].append(float(READY.search(log).group(1)))
            out["base_wall"].append(one(d, BASE_SCRIPT, ["file"])[0])
    base = sorted(out["base_wall"])[len(out["base_wall"]) // 2]
    out["first_result"] = [w - base for w in out["mcp_wall"]]
    return out


def show(r: dict[str, Any], _args: Any) -> str:
    """The figures for people."""
    return "\n".join([
        f"MCP servers: {r['jobs']} jobs with mcp-server-time (stdio), each its own server; {r['machine']}",
        f"  first MCP tool result, over the same job without a server: {summary(r['first_result'], 50, 90, 100)}",
        f"  server ready (start, handshake, tool list):               {summary(r['ready'], 50, 90, 100)}",
        f"  the call itself:                                          {summary(r['call'], 50, 90, 100)}",
        f"  job wall time with the server:                            {summary(r['mcp_wall'], 50, 90, 100)}",
        f"  job wall time without (list_files):                       {summary(r['base_wall'], 50, 90, 100)}"])


if __name__ == "__main__":
    command_line(__doc__, measure, show, jobs=20)
