"""``python -m bench``: every benchmark of issue 8 in one run, figures printed as they come.

``--quick`` shrinks the batch benchmark (100 prompts instead of 1,000) for a
look that takes minutes, not the better part of an hour.  Each benchmark can
also be run on its own (``bench/bench_*.py --help``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (bench_batch, bench_batch_scheduling, bench_control, bench_events, bench_memory,  # noqa: E402
                   bench_spawn)
from bench.common import machine  # noqa: E402


def main() -> None:
    """Run them all; see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    prompts = 100 if args.quick else 1000
    print(f"# hermesd benchmarks · {machine()}\n", flush=True)
    print(bench_spawn.report(bench_spawn.run(40)) + "\n", flush=True)
    print(bench_control.report(bench_control.run(2000, 5.0)) + "\n", flush=True)
    print(bench_events.report(bench_events.run(30, 50, 6, 120, 20.0), 50, 20.0) + "\n", flush=True)
    print(bench_memory.report(bench_memory.run(16), 16) + "\n", flush=True)
    rows = bench_batch.run(prompts, 1, 1.0, [4, 16], ["forkserver", "spawn"])
    print(bench_batch.report(rows, prompts, 1, 1.0) + "\n", flush=True)
    print(bench_batch_scheduling.report(bench_batch_scheduling.run()), flush=True)
    print(f"\n# done · {machine()}")


if __name__ == "__main__":
    main()
