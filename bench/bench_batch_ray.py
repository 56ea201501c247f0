"""Batch overhead on a Ray cluster beside the local executor, at the same concurrency.

The same measurement as ``bench_batch.py`` (scripted provider: every model call
sleeps ``--delay`` seconds; ideal time = ⌈prompts / workers⌉ × turns × delay;
overhead = measured / ideal − 1, the whole ``hermes-batch`` process from start
to exit), run three ways with ``--workers`` prompts in flight:

* ``local spawn`` and ``local forkserver`` (``--methods``): ``batch_item`` children of hermesd;
* ``ray`` (first; its cluster is stopped before the local runs): ``--executor ray`` on a 3-node Ray cluster started on this machine
  (``tests.ray_cluster``: a head without CPUs and two worker nodes of
  ``--cpus`` logical CPUs each; every item reserves ``2 × cpus / workers`` CPUs
  so that exactly ``--workers`` fit).  Each item runs on one of the driver's hosts
  (a Ray actor of several item slots per node, ``child/item_host.py``) as a process of
  its own; the cluster's start is not counted.

With ``--batches N`` each executor runs N batches of ``--prompts`` in a row on one daemon
(a row each): from the second on, a Ray batch takes the driver its predecessor left idle in
the pool (``ray.idle_seconds``, ``batch/ray_pool.py``), its hosts and their warm templates
already up, so it no longer pays Ray's start (``ray.init``, the hosts' worker processes, the
templates' imports); the local rows are there for its cost per prompt beside theirs.

Usage::

    .venv/bin/python bench/bench_batch_ray.py [--prompts 1000] [--turns 1] [--delay 1.0]
        [--workers 8] [--cpus 2] [--batches 1] [--methods spawn,forkserver] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_batch import dataset, one_run, table  # noqa: E402
from bench.common import daemon, ideal_seconds  # noqa: E402
from tests.ray_cluster import RayCluster  # noqa: E402


def run(prompts: int, turns: int, delay: float, workers: int, cpus: int = 2,
        methods: tuple[str, ...] = ("spawn", "forkserver"), batches: int = 1) -> list[dict]:
    """One row per executor and batch (``batches`` in a row on one daemon): ray first (its
    cluster is stopped before the local runs), then local with each start method of ``methods``."""
    ideal = ideal_seconds(prompts, turns * delay, workers)
    rows = []

    def runs(executor: str, d, extra: tuple[str, ...] = ()) -> None:
        data = dataset(d.base / "prompts.jsonl", prompts, turns, delay)
        for n in range(1, batches + 1):
            result = one_run(d, data, workers, f"bench_{executor.split()[0]}_{n}", extra)
            rows.append({"executor": executor + (f" #{n}" if batches > 1 else ""), "workers": workers, "ideal": ideal,
                         **result, "overhead": result["wall"] / ideal - 1,
                         "per_prompt": (result["wall"] - ideal) * workers / prompts})

    config = {"batch": {"max_turns": turns + 1}, "supervisor": {"max_children": max(16, workers + 1)},
              "ray": {"idle_seconds": 600}}
    cluster = RayCluster(workers=2, cpus=cpus).start()
    try:
        with daemon(config) as d:
            runs("ray (3 nodes)", d, ("--executor", "ray", "--ray_address", cluster.address,
                                      "--ray_num_cpus", f"{2 * cpus / workers:g}"))
    finally:
        cluster.stop()
    for method in methods:
        with daemon(config, warm=method == "forkserver") as d:
            runs(f"local {method}", d)
    return rows


def report(rows: list[dict], prompts: int, turns: int, delay: float) -> str:
    """The figures as text."""
    return table(f"batch overhead, local vs Ray: {prompts} prompts x {turns} turn(s) x {delay:g}s per model call",
                 rows, "executor", "executor", 20)


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--batches", type=int, default=1, help="batches in a row on one daemon (a row each)")
    parser.add_argument("--methods", default="spawn,forkserver", help="start methods of the local runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run(args.prompts, args.turns, args.delay, args.workers, args.cpus, tuple(args.methods.split(",")),
               args.batches)
    print(json.dumps(rows) if args.json else report(rows, args.prompts, args.turns, args.delay))


if __name__ == "__main__":
    main()
