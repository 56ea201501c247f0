"""Per-prompt scheduling vs batch-at-a-time scheduling, with heavy-tailed prompt durations.

Runs a real hermesd (scripted provider, so every prompt costs a child process
plus a ``sleep`` drawn from a Pareto distribution) three ways over the same
prompts, and prints the wall-clock time of each and its ratio to per-prompt
scheduling:

* ``per-prompt``: one hermesd batch; a worker takes the next prompt the moment
  its prompt ends (what ``hermes-batch`` does);
* ``batch barrier``: the batches one after the other, each with ``--workers``
  workers; the next batch starts when the slowest prompt of this one ends;
* ``worker per batch``: batch_runner's pool: ``--workers`` batches at a time,
  each worked through prompt after prompt by one worker.

It also prints the ideal times of the three schedules computed from the
sleeps alone (no process costs), so the effect of the schedule can be told
from hermesd's overhead.  Usage::

    .venv/bin/python bench/bench_batch_scheduling.py [--prompts 32] [--workers 4]
        [--batch-size 8] [--alpha 1.2] [--scale 0.5] [--cap 15] [--seed 3] [--json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402
from tests.harness import DaemonProc  # noqa: E402


def sleeps(n: int, alpha: float, scale: float, cap: float, seed: int) -> list[float]:
    """``n`` Pareto(``alpha``) durations in seconds, ``scale`` the minimum, at most ``cap``."""
    rng = random.Random(seed)
    return [round(min(cap, scale * rng.paretovariate(alpha)), 3) for _ in range(n)]


def ideal_per_prompt(durations: list[float], workers: int) -> float:
    """Makespan of list scheduling: each prompt to the first free worker, in order."""
    free = [0.0] * workers
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def ideal_barrier(durations: list[float], workers: int, batch_size: int) -> float:
    """Sum over batches of the per-prompt makespan inside each batch."""
    return sum(ideal_per_prompt(durations[i:i + batch_size], workers) for i in range(0, len(durations), batch_size))


def ideal_worker_per_batch(durations: list[float], workers: int, batch_size: int) -> float:
    """List scheduling of whole batches (each batch's prompts one after the other)."""
    return ideal_per_prompt([sum(durations[i:i + batch_size]) for i in range(0, len(durations), batch_size)], workers)


def write_dataset(path: Path, durations: list[float], offset: int = 0) -> Path:
    """One scripted prompt per duration: think, sleep, answer."""
    lines = [json.dumps({"prompt": f"prompt {offset + i}",
                         "script": [{"thinking": "I think it over.", "text": "done", "sleep": d}]}) for i, d in enumerate(durations)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_batch(daemon: DaemonProc, dataset: Path, name: str, batch_size: int, workers: int) -> None:
    """One hermesd batch run, to its end."""
    record = daemon.call("batch.run", dataset_file=str(dataset), run_name=name, batch_size=batch_size,
                         num_workers=workers, output_dir=str(daemon.base / "out"))
    final = daemon.wait_job(record["id"], timeout=3600)
    if final["status"] != "completed":
        raise SystemExit(f"batch {name} ended {final['status']}: {final.get('error')}")


def chunks(durations: list[float], size: int) -> list[tuple[int, list[float]]]:
    """``(offset, durations)`` of each batch."""
    return [(i, durations[i:i + size]) for i in range(0, len(durations), size)]


def timed(fn) -> float:
    """Seconds ``fn()`` takes."""
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def run(prompts: int = 32, workers: int = 4, batch_size: int = 8, alpha: float = 1.2, scale: float = 0.5,
        cap: float = 15.0, seed: int = 3) -> dict:
    """Run the three schedules on one daemon; the measured and ideal seconds of each, and ratios."""
    durations = sleeps(prompts, alpha, scale, cap, seed)
    base = Path(tempfile.mkdtemp(prefix="hermes-bench-batch-"))
    daemon = DaemonProc(base, {"supervisor": {"max_children": workers}}).start()
    try:
        per_prompt = timed(lambda: run_batch(daemon, write_dataset(base / "all.jsonl", durations), "per_prompt",
                                             batch_size, workers))

        def barrier() -> None:
            for offset, part in chunks(durations, batch_size):
                run_batch(daemon, write_dataset(base / f"b{offset}.jsonl", part, offset), f"barrier_{offset}",
                          batch_size, workers)

        def worker_per_batch() -> None:
            todo = chunks(durations, batch_size)
            lock = threading.Lock()

            def worker() -> None:
                while True:
                    with lock:
                        if not todo:
                            return
                        offset, part = todo.pop(0)
                    run_batch(daemon, write_dataset(base / f"w{offset}.jsonl", part, offset), f"worker_{offset}",
                              batch_size, 1)

            threads = [threading.Thread(target=worker) for _ in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        measured = {"per-prompt": per_prompt, "batch barrier": timed(barrier),
                    "worker per batch": timed(worker_per_batch)}
    finally:
        daemon.cleanup()
    ideal = {"per-prompt": ideal_per_prompt(durations, workers),
             "batch barrier": ideal_barrier(durations, workers, batch_size),
             "worker per batch": ideal_worker_per_batch(durations, workers, batch_size)}
    return {"prompts": prompts, "workers": workers, "batch_size": batch_size, "alpha": alpha,
            "sleep_total": round(sum(durations), 2), "sleep_max": max(durations),
            "measured_seconds": {k: round(v, 2) for k, v in measured.items()},
            "ideal_seconds": {k: round(v, 2) for k, v in ideal.items()},
            "ratio_to_per_prompt": {k: round(v / measured["per-prompt"], 2) for k, v in measured.items()}}


def report(result: dict) -> str:
    """The figures of :func:`run` as text."""
    measured, ideal = result["measured_seconds"], result["ideal_seconds"]
    lines = [f"batch scheduling: {result['prompts']} prompts, {result['workers']} workers, batch size "
             f"{result['batch_size']}; Pareto(alpha={result['alpha']}) sleeps: total {result['sleep_total']}s, "
             f"longest {result['sleep_max']}s", machine(),
             f"  {'schedule':<18}{'measured':>10}{'ideal':>9}{'ratio':>8}"]
    for name in measured:
        lines.append(f"  {name:<18}{measured[name]:>9.2f}s{ideal[name]:>8.2f}s"
                     f"{measured[name] / measured['per-prompt']:>7.2f}x")
    return "\n".join(lines)


def main() -> None:
    """Parse the flags, run the three schedules, print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=1.2, help="Pareto shape (smaller = heavier tail)")
    parser.add_argument("--scale", type=float, default=0.5, help="shortest sleep, seconds")
    parser.add_argument("--cap", type=float, default=15.0, help="longest sleep, seconds")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    result = run(a.prompts, a.workers, a.batch_size, a.alpha, a.scale, a.cap, a.seed)
    print(json.dumps(result) if a.json else report(result))


if __name__ == "__main__":
    main()
