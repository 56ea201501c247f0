"""Resume after a crash: model calls paid twice per resumed job, and how soon a resumed child calls the model.

``--jobs`` background jobs of three model turns each (a terminal command in turns 1
and 2, then the final answer; the fake Messages API of ``tests/fakes`` answers and
counts every call) run on a warm daemon, which is killed (``kill -9``) and started
again, in two places:

* ``tool``: while each job runs its first command (nothing in flight at the model:
  the ideal is no call repeated; the command's result is "interrupted by a restart");
* ``model``: while each job waits for its second model reply (that reply is lost
  with the child and paid again: the ideal is one call repeated).

Figures: model calls repeated per resumed job (calls beyond the three each job
needs; goal ≤ 1), and the seconds from the new daemon's start (``hermesd run``
launched) to each resumed child's first model call (p50, max).

Usage::

    .venv/bin/python bench/bench_resume.py [--jobs 8] [--json]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine, pct, wait_for  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block, tool_use_block  # noqa: E402

TURNS = 3
COMMAND = "sleep 4; echo turn"
IN_FLIGHT_SECONDS = 20.0
"""How long the second model reply takes before the crash (``model``): the kill comes meanwhile."""


class Brain:
    """The fake model: a command until a conversation holds ``TURNS - 1`` results, then the answer.
    ``calls[goal]``: the monotonic time of each call; ``slow_second``: the second reply hangs."""

    def __init__(self, slow_second: bool):
        self.calls: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()
        self.slow_second = slow_second
        self.crashed = threading.Event()

    def __call__(self, request):
        messages = request.body["messages"]
        goal = str(messages[0]["content"] if isinstance(messages[0]["content"], str)
                   else messages[0]["content"][0].get("text", "")).splitlines()[0]
        with self.lock:
            self.calls[goal].append(time.monotonic())
        results = sum(1 for m in messages if m["role"] == "user" and isinstance(m["content"], list)
                      and any(b.get("type") == "tool_result" for b in m["content"]))
        if results == 1 and self.slow_second and not self.crashed.is_set():
            self.crashed.wait(IN_FLIGHT_SECONDS)  # the daemon is killed while this reply is awaited
        if results < TURNS - 1:
            return Message([tool_use_block("terminal", {"command": COMMAND})], stop_reason="tool_use")
        return Message([text_block("finished")])


def _journal(d: Any, job: str) -> list[str]:
    path = d.home / "jobs" / job / "journal.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["t"] for line in lines if line.endswith("}")]


def scenario(where: str, jobs: int) -> dict[str, Any]:
    """One crash at ``where`` (``tool`` or ``model``) with ``jobs`` jobs; returns its figures."""
    brain = Brain(slow_second=where == "model")
    with FakeAnthropic() as api:
        api.default = brain
        config = {"provider": "anthropic", "base_url": api.url, "toolsets": ["terminal"],
                  "delegation": {"max_async_children": jobs}}
        with daemon(config, {"ANTHROPIC_API_KEY": "bench-key"}, warm=True) as d:
            goals = [f"bench job {i}" for i in range(jobs)]
            ids = {g: d.delegate(g, background=True, toolsets=["terminal"])["id"] for g in goals}

            def at_crash_point() -> bool:
                if where == "tool":
                    return all(_journal(d, j)[-1:] == ["tool_started"] for j in ids.values())
                return all(len(brain.calls[g]) >= 2 for g in goals)

            wait_for(at_crash_point, 300, 0.05, f"every job at its crash point ({where})")
            d.kill9()
            brain.crashed.set()
            before = {g: len(brain.calls[g]) for g in goals}
            started = time.monotonic()
            d.start(120.0)
            finals = {g: d.wait_job(j, timeout=300) for g, j in ids.items()}
    first_call = [brain.calls[g][before[g]] - started for g in goals if len(brain.calls[g]) > before[g]]
    return {"where": where, "jobs": jobs,
            "completed": sum(f["status"] == "completed" for f in finals.values()),
            "resumed": sum(bool(f.get("resumes")) for f in finals.values()),
            "repeated": [len(brain.calls[g]) - TURNS for g in goals],
            "first_call_seconds": first_call}


def run(jobs: int = 8) -> list[dict[str, Any]]:
    """Both scenarios."""
    return [scenario("tool", jobs), scenario("model", jobs)]


def report(rows: list[dict[str, Any]], _args: Any = None) -> str:
    """The figures as text."""
    lines = ["resume after kill -9 (three-turn background jobs, fake Messages API)", machine()]
    for row in rows:
        repeated, first = row["repeated"], row["first_call_seconds"]
        lines.append(f"  killed in {row['where']:<5}: {row['completed']}/{row['jobs']} completed, "
                     f"{row['resumed']} resumed; model calls repeated per job: mean "
                     f"{sum(repeated) / len(repeated):.2f}, max {max(repeated)} (goal <= 1); start to the resumed "
                     f"child's first model call: p50 {pct(first, 50):.2f} s, max {max(first):.2f} s"
                     if first else "  (no model call after the restart)")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, report, jobs=8)
