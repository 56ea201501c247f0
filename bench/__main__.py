"""``python -m bench``: every benchmark of issues 8, 14, 15, 17, 18, 20 and 22 in one run, figures printed as they come.

First hermesd beside circus and supervisord (:mod:`bench.bench_peers`, issue
22: every row, the ratios, each goal met or not; the peers are installed from
PyPI into ``--venv`` on first use), then the rest.  ``--quick`` shrinks the
batch benchmarks (96 prompts instead of 1,024: whole rounds of 16 workers), the long-run one
(200 prompts instead of 2,000) and the fleet (64 children waiting at once instead of 256) for a look that takes minutes, not the better
part of an hour; ``--only-peers`` runs only the comparison with its peers (:mod:`bench.bench_peers`),
``--only-default`` only the default configuration's figures (:mod:`bench.bench_warm_start`: batch
overhead with the default configuration, event-loop stalls while the zygote is
killed).  Each benchmark can also be run on its own (``bench/bench_*.py --help``).
``python -m bench soak`` is the soak of issue 44 (:mod:`bench.soak`: random faults under a mixed
workload, then an oracle; ``python -m bench soak --help``), not part of the run of them all.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (bench_batch, bench_batch_ray, bench_batch_scheduling, bench_cache, bench_compaction,  # noqa: E402
                   bench_containers, bench_control, bench_events, bench_fleet, bench_governor, bench_local_model, bench_longrun,
                   bench_memory, bench_memory_limit,
                   bench_peers, bench_resume, bench_spawn, bench_warm_start, bench_worktrees)
from child.providers import local  # noqa: E402
from bench.common import machine  # noqa: E402


def main() -> None:
    """Run them all; see the module doc.  ``python -m bench soak …`` runs the soak instead
    (:mod:`bench.soak`, its own options)."""
    if sys.argv[1:2] == ["soak"]:
        from bench.soak import main as soak

        sys.exit(soak(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only-default", action="store_true")
    parser.add_argument("--only-peers", action="store_true")
    parser.add_argument("--venv", type=Path, default=bench_peers.DEFAULT_VENV,
                        help="the virtual environment of circus and supervisor (made on first use)")
    args = parser.parse_args()
    prompts = 96 if args.quick else 1024  # whole rounds of 16 (and of 4) workers
    print(f"# hermesd benchmarks · {machine()}\n", flush=True)
    if not args.only_default:
        print(bench_peers.report(bench_peers.run(args.venv, prompts=prompts)) + "\n", flush=True)
        if args.only_peers:
            print(f"# done · {machine()}")
            return
    print(bench_warm_start.report(bench_warm_start.run(prompts, 1.0, 16, 100)) + "\n", flush=True)
    if args.only_default:
        print(f"# done · {machine()}")
        return
    print(bench_spawn.report(bench_spawn.run(40)) + "\n", flush=True)
    print(bench_control.report(bench_control.run(2000, 5.0)) + "\n", flush=True)
    print(bench_events.report(bench_events.run(30, 50, 6, 120, 20.0), 50, 20.0) + "\n", flush=True)
    print(bench_memory.report(bench_memory.run(16), 16) + "\n", flush=True)
    print(bench_memory_limit.report(bench_memory_limit.run(1536, 200.0, 2 if args.quick else 5)) + "\n", flush=True)
    print(bench_fleet.report(bench_fleet.run(64 if args.quick else 256)) + "\n", flush=True)
    print(bench_compaction.report(bench_compaction.run(60 if args.quick else 300)) + "\n", flush=True)
    rows = bench_batch.run(prompts, 1, 1.0, [4, 16], ["forkserver", "spawn"])
    print(bench_batch.report(rows, prompts, 1, 1.0) + "\n", flush=True)
    print(bench_batch_scheduling.report(bench_batch_scheduling.run()) + "\n", flush=True)
    print(bench_governor.report(bench_governor.run(prompts=48 if args.quick else 120)) + "\n", flush=True)
    print(bench_resume.report(bench_resume.run(jobs=4 if args.quick else 8)) + "\n", flush=True)
    if local.available():
        print(bench_local_model.report(bench_local_model.run({"installed": sys.executable}, 3, 128, 1), 128, 1),
              flush=True)
    else:
        print(f"embedded model: not installed ({local.INSTALL_HINT})", flush=True)
    print(bench_longrun.report(bench_longrun.run(200 if args.quick else 2000, 10, 100_000, 500)), flush=True)
    print(bench_containers.report(bench_containers.run(10)), flush=True)
    print(bench_worktrees.report(bench_worktrees.run(10, 2000), 2000), flush=True)
    print(bench_cache.report(bench_cache.run(20)), flush=True)
    if importlib.util.find_spec("ray") is None:
        print("batch overhead, local vs Ray: skipped (pip install -e '.[ray]')", flush=True)
    else:
        print(bench_batch_ray.report(bench_batch_ray.run(prompts, 1, 1.0, 8), prompts, 1, 1.0), flush=True)
    print(f"\n# done · {machine()}")


if __name__ == "__main__":
    main()
