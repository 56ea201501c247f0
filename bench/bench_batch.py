"""Batch overhead: measured time over ideal time for a batch against a fake model.

The fake model is the scripted provider: every model call of a prompt sleeps
``--delay`` seconds (a model with a fixed latency and no CPU cost), over
``--turns`` turns (the turns before the last call a tool, ``true``).  The ideal
time is ``⌈prompts / workers⌉ × turns × delay`` (:func:`bench.common.ideal_seconds`); the measured time is the
whole ``hermes-batch --dataset_file F --batch_size N --run_name R
--num_workers W --output_dir D`` process, from start to exit (it waits for the
run and follows its progress).  Overhead = measured / ideal − 1; per prompt
it is what each worker slot loses between prompts (child start and end,
result, fsynced batch line).  Each start method runs with each worker count.

Usage::

    .venv/bin/python bench/bench_batch.py [--prompts 1024] [--turns 1] [--delay 1.0]
        [--workers 4,16] [--methods spawn,forkserver] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import daemon, ideal_seconds, machine  # noqa: E402


def dataset(path: Path, prompts: int, turns: int, delay: float) -> Path:
    """Write ``prompts`` prompts of ``turns`` scripted calls of ``delay`` seconds each."""
    tool = {"thinking": "a step", "sleep": delay,
            "tool_calls": [{"name": "terminal", "input": {"command": "true"}}]}
    script = [tool] * (turns - 1) + [{"thinking": "the answer", "text": "done", "sleep": delay}]
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}", "script": script}) + "\n" for i in range(prompts)))
    return path


def one_run(d, data: Path, workers: int, name: str, extra: tuple[str, ...] = ()) -> dict:
    """Run ``hermes-batch`` (plus the flags ``extra``) to the end; returns its wall time
    and the run's statistics."""
    exe = shutil.which("hermes-batch", path=str(Path(sys.executable).parent))
    argv = [exe] if exe else [sys.executable, "-c", "from client.batch import main; main()"]
    argv += ["--dataset_file", str(data), "--batch_size", "100", "--run_name", name,
             "--num_workers", str(workers), "--output_dir", str(d.base / "out"), "--json", *extra]
    t0 = time.monotonic()
    out = subprocess.run(argv, env=d.env, cwd=str(d.work), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise RuntimeError(f"hermes-batch failed ({out.returncode}): {out.stderr[-2000:]}")
    stats = json.loads((d.base / "out" / name / "statistics.json").read_text())
    return {"wall": wall, "prompts": stats["prompts"], "daemon_wall": stats["duration"]["wall_seconds"]}


def run(prompts: int, turns: int, delay: float, workers: list[int], methods: list[str]) -> list[dict]:
    """One row per start method and worker count."""
    rows = []
    for method in methods:
        with daemon({"batch": {"max_turns": turns + 1}}, warm=method == "forkserver") as d:
            data = dataset(d.base / "prompts.jsonl", prompts, turns, delay)
            for w in workers:
                result = one_run(d, data, w, f"bench_{method}_{w}")
                ideal = ideal_seconds(prompts, turns * delay, w)
                rows.append({"method": method, "workers": w, "ideal": ideal, **result,
                             "overhead": result["wall"] / ideal - 1,
                             "per_prompt": (result["wall"] - ideal) * w / prompts})
    return rows


def report(rows: list[dict], prompts: int, turns: int, delay: float) -> str:
    """The figures as text."""
    return table(f"batch overhead: {prompts} prompts x {turns} turn(s) x {delay:g}s per model call", rows,
                 "method", "start", 11)


def table(title: str, rows: list[dict], key: str, label: str, width: int) -> str:
    """``title``, the machine line, then one line per row: ``row[key]`` (column ``label``,
    ``width`` wide), workers, ideal, measured, overhead, per prompt."""
    lines = [title, machine(),
             f"  {label:<{width}} {'workers':>7} {'ideal':>8} {'measured':>9} {'overhead':>9} {'per prompt':>11}"]
    for r in rows:
        lines.append(f"  {r[key]:<{width}} {r['workers']:>7} {r['ideal']:>7.1f}s {r['wall']:>8.1f}s "
                     f"{r['overhead']:>8.1%} {r['per_prompt'] * 1000:>8.0f} ms")
    return "\n".join(lines)


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=1024)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--workers", default="4,16")
    parser.add_argument("--methods", default="spawn,forkserver")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run(args.prompts, args.turns, args.delay, [int(w) for w in args.workers.split(",")],
               args.methods.split(","))
    print(json.dumps(rows) if args.json else report(rows, args.prompts, args.turns, args.delay))


if __name__ == "__main__":
    main()
