"""``python -m bench soak``: a real hermesd under a mixed workload and random faults, then an oracle.

Issue 44.  A real daemon (forkserver, the default), the fake Messages API of ``tests/fakes`` (the
real SSE wire format, answered by :mod:`bench.soak.brain`) and, each cycle, a mixed workload
(:mod:`bench.soak.workload`: background delegations running terminal commands that append to the
effects file, jobs with budgets, jobs waiting on approvals, a session taking turns and delegating in
the background, a Kanban chain, a batch) while faults (:mod:`bench.soak.faults`: ``kill -9`` and
SIGTERM of the daemon, ``kill -9`` of children and of the zygote, the provider failing, the disk full,
``state.db`` locked, a ``reload``, clients going away) come at random moments drawn from the printed
seed (``--seed`` replays the run).  Each cycle ends when everything submitted has settled.  After the
cycles, the control socket is fuzzed (:mod:`bench.soak.fuzz`), and then the oracle
(:mod:`bench.soak.oracle`) counts what was lost or duplicated; the daemon's RSS and open file
descriptors after the last cycle must be within 10 % of their values after the first cycle, and
after the fuzz within 10 % of their values before it — once every op was called once
(:func:`bench.soak.fuzz.warm_up`: an op's first call may import what it needs, ``batch.cancel``
4 MiB of the batch package, which is no leak) — and no process may be left once it stopped.

Usage::

    .venv/bin/python -m bench soak [--cycles 20] [--seed N] [--faults 6] [--fuzz 10000] [--small] [--json]

Exit status 1 when the oracle does not hold.  As root, ``HERMES_HOME`` is a tmpfs of its own
(``--disk-mib``) so the disk can be made full; otherwise the disk fault is skipped, saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import psutil

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.soak import brain as brain_mod  # noqa: E402
from bench.soak.faults import KINDS, Faults, schedule  # noqa: E402
from bench.soak import fuzz as fuzzing  # noqa: E402  (the module: its function fuzz would shadow it)
from bench.soak.oracle import TERMINAL_NAMES, check  # noqa: E402
from bench.soak.workload import Approver, Scale, Workload, call  # noqa: E402
from tests.chaos.helpers import leftovers, titled  # noqa: E402
from tests.harness import DaemonProc, wait_for  # noqa: E402

SETTLED = {"done", "archived", "blocked"}
"""Kanban task states the soak waits for (a blocked task waits for a person: the oracle then says so)."""


class Soak:
    """One run: the daemon ``d``, the ``brain``, the ``workload``, the ``faults``; ``problems``: what
    went wrong on the way (a fault that could not be injected, a cycle that never settled)."""

    def __init__(self, base: Path, seed: int, scale: Scale, log: Callable[[str], None], disk_mib: int):
        self.base, self.seed, self.log = base, seed, log
        self.rng = random.Random(seed)
        self.problems: list[str] = []
        self.tmpfs = False
        home = base / "home"
        home.mkdir(parents=True)
        if os.geteuid() == 0:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_mib}m,mode=0700", "tmpfs", str(home)],
                                  capture_output=True, text=True)
            self.tmpfs = done.returncode == 0
            if not self.tmpfs:
                log(f"  (no tmpfs for HERMES_HOME: {done.stderr.strip()}; the disk fault is skipped)")
        self.effects = base / "effects.log"
        self.api, self.brain = brain_mod.serve(self.effects)
        config = {"provider": "anthropic", "base_url": self.api.url, "toolsets": ["terminal", "file"],
                  "approvals": {"always": ["write_file"]},
                  "delegation": {"max_async_children": 6},
                  "supervisor": {"max_children": 10, "start_method": "forkserver"}}
        self.d = DaemonProc(base, config, {"ANTHROPIC_API_KEY": "soak-key"})
        self.workload = Workload(self.d, self.rng, scale)
        self.faults = Faults(self)
        self._ids = itertools.count()
        self.job_ids: set[str] = set()

    def next_id(self) -> int:
        """A number no other piece of work has."""
        return next(self._ids)

    def call(self, op: str, **args: Any) -> Any:
        """``op``, asked again while the daemon is restarting or busy (:func:`bench.soak.workload.call`)."""
        return call(self.d, op, **args)

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the daemon keeps, oldest first: ``ps`` page after page (a page holds at most 1,000)."""
        jobs, cursor = [], None
        while True:
            page = self.call("ps", all=True, **({"cursor": cursor} if cursor is not None else {}))
            jobs += page["jobs"]
            if not page.get("more") or page.get("next") is None:
                return jobs
            cursor = page["next"]

    def settle(self, timeout: float) -> bool:
        """Wait until every job is terminal, every Kanban task settled and no notification pending, twice
        in a row; False (and a problem noted) after ``timeout`` seconds."""
        calm = [0]

        def quiet() -> bool:
            jobs = self.jobs()
            self.job_ids |= {j["id"] for j in jobs}
            tasks = self.call("kanban.list")["tasks"]
            pending = self.call("status").get("pending_notifications", 0)
            still = all(j["status"] in TERMINAL_NAMES for j in jobs) and all(
                t["status"] in SETTLED for t in tasks) and not pending
            calm[0] = calm[0] + 1 if still else 0
            return calm[0] >= 2

        try:
            wait_for(quiet, timeout, 0.5, "the work to settle")
            return True
        except AssertionError:
            stuck = [(j["id"], j["kind"], j["status"]) for j in self.jobs()
                     if j["status"] not in TERMINAL_NAMES]
            self.problems.append(f"did not settle in {timeout:.0f}s: {stuck[:10]}")
            return False

    def footprint(self) -> dict[str, Any]:
        """The daemon's RSS (MiB) and open file descriptors now, and what they are (``open``: each
        descriptor's target, a socket or pipe by its kind; for the breach's message)."""
        proc = psutil.Process(self.d.proc.pid)
        targets = []
        for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                targets.append(target.split(":")[0] if target.startswith(("socket:", "pipe:"))
                               else target.replace(str(self.base), "BASE"))
        return {"rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds(), "open": sorted(targets)}

    def close(self) -> list[Any]:
        """Stop the daemon (SIGTERM), then list what is left of it; end everything, unmount."""
        left: list[Any] = []
        try:
            if self.d.proc is not None and self.d.proc.poll() is None:
                self.d.stop(60.0)
            with contextlib.suppress(AssertionError):
                wait_for(lambda: not leftovers(self.d, self.job_ids), 10, 0.1, "no process left")
            left = [(p, " ".join(psutil.Process(p).cmdline())[:80]) for p in leftovers(self.d, self.job_ids)
                    if psutil.pid_exists(p)]
        finally:
            self.d.cleanup()
            for proc in titled(self.job_ids):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            self.api.close()
            if self.tmpfs:
                subprocess.run(["umount", "-l", str(self.d.home)], capture_output=True)
        return left


def run(cycles: int = 20, seed: int | None = None, faults: int = 6, fuzz_frames: int = 10_000,
        scale: Scale | None = None, disk_mib: int = 192, settle_seconds: float = 300.0,
        kinds: tuple[str, ...] = KINDS, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole soak; returns its figures and ``breaches`` (the oracle's, empty when it holds)."""
    seed = random.randrange(1 << 31) if seed is None else seed
    scale = scale or Scale()
    log(f"soak seed {seed} ({cycles} cycles, {faults} faults each, {fuzz_frames} fuzzed frames; "
        f"replay: --seed {seed})")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hermes-soak-") as tmp:
        soak = Soak(Path(tmp), seed, scale, log, disk_mib)
        result: dict[str, Any] = {"seed": seed, "cycles": cycles}
        try:
            soak.d.start(120.0)
            soak.workload.setup()
            approver = Approver(soak.d)
            first: dict[str, float] = {}
            for cycle in range(cycles):
                log(f"cycle {cycle + 1}/{cycles}")
                spread = 6.0 + 0.15 * scale.prompts
                injecting = schedule(soak.faults, soak.rng, faults, spread, log, kinds)
                soak.workload.cycle(cycle)
                injecting.join()
                soak.settle(settle_seconds)
                if cycle == 0:
                    first = soak.footprint()
            after_cycles = soak.footprint()
            log(f"fuzzing the control socket: {fuzz_frames} frames")
            fuzzing.warm_up(soak.d.runtime)
            mid = soak.footprint()
            result["fuzz"] = fuzzing.fuzz(soak.d.runtime, seed, fuzz_frames) if fuzz_frames else {}
            if soak.d.proc.poll() is not None:
                soak.problems.append(f"hermesd died during the fuzz: {soak.d.log()[-2000:]}")
                soak.faults._restart(lambda: None)
            soak.settle(settle_seconds)
            approver.stop()
            last = soak.footprint()
            breaches, figures = check(soak)
            result.update(figures)
            result["footprint"] = {"first_cycle": first, "last_cycle": after_cycles, "fuzz_start": mid, "end": last}
            for key in ("rss_mib", "fds"):
                for (was, now, when) in ((first, after_cycles, "after the last cycle"), (mid, last, "after the fuzz")):
                    if was and now[key] > was[key] * 1.10:
                        more = Counter(now["open"]) - Counter(was["open"]) if key == "fds" else {}
                        breaches.append(f"daemon {key} {now[key]:.1f} {when}, {was[key]:.1f} "
                                        f"{'after the first cycle' if was is first else 'before the fuzz'} (> +10 %)"
                                        + (f"; more open: {dict(more)}" if more else ""))
        except Exception as exc:  # noqa: BLE001 - reported as a breach, the run still cleans up
            soak.problems.append(f"the soak stopped: {type(exc).__name__}: {exc}")
            breaches = []
        finally:
            left = soak.close()
        if left:
            breaches.append(f"processes left after the daemon stopped: {left}")
        fuzz_stats = result.get("fuzz") or {}
        if fuzz_stats.get("untyped"):
            breaches.append(f"fuzz: {len(fuzz_stats['untyped'])} answers not a typed error: {fuzz_stats['untyped'][:3]}")
        result["breaches"] = soak.problems + breaches
        result["faults"] = dict(soak.faults.injected)
        result["restarts"] = len(soak.faults.restarts)
        result["leftover_processes"] = len(left)
        result["model_calls"] = sum(soak.brain.calls.values())
        result["provider_refused"] = dict(soak.brain.refused)
        result["seconds"] = round(time.monotonic() - started, 1)
    return result


def report(result: dict[str, Any]) -> str:
    """The figures as text."""
    from bench.common import machine

    foot = result.get("footprint") or {}
    first, cycles, mid, end = (foot.get(k) or {} for k in ("first_cycle", "last_cycle", "fuzz_start", "end"))
    fz = result.get("fuzz") or {}
    lines = [f"soak (issue 44) · seed {result['seed']} · {machine()}",
             f"  cycles {result['cycles']}, {result['seconds']} s; faults injected: "
             + ", ".join(f"{k} {v}" for k, v in sorted(result.get("faults", {}).items())),
             f"  jobs {result.get('jobs', 0)}, batch prompts {result.get('prompts', 0)}; statuses "
             f"{result.get('statuses', {})}",
             f"  lost {result.get('lost', '?')}, duplicated {result.get('duplicated', '?')}, extra model calls "
             f"{result.get('extra_calls', '?')} (of {result.get('model_calls', 0)}; provider refused "
             f"{result.get('provider_refused', {})}), leaked processes {result.get('leftover_processes', '?')}",
             f"  bill {result.get('bill', {})}; approval requests {result.get('approvals', 0)}",
             f"  daemon RSS {first.get('rss_mib', 0):.1f} -> {cycles.get('rss_mib', 0):.1f} MiB, open fds "
             f"{first.get('fds', 0)} -> {cycles.get('fds', 0)} (after the first cycle -> after the last); during the "
             f"fuzz RSS {mid.get('rss_mib', 0):.1f} -> {end.get('rss_mib', 0):.1f} MiB, fds {mid.get('fds', 0)} -> "
             f"{end.get('fds', 0)} (before -> after)",
             f"  fuzz: {fz.get('sent', 0)} frames sent ({fz.get('raw', 0)} raw ZMTP), {fz.get('answered', 0)} answered"]
    breaches = result.get("breaches") or []
    lines.append("  oracle: holds" if not breaches else f"  oracle: {len(breaches)} breaches")
    lines += [f"    - {b}" for b in breaches]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="replay a run (its seed is printed first)")
    parser.add_argument("--faults", type=int, default=6, help="faults per cycle")
    parser.add_argument("--fuzz", type=int, default=10_000, help="frames fuzzed at the end")
    parser.add_argument("--small", action="store_true", help="the slow test's small workload")
    parser.add_argument("--disk-mib", type=int, default=192, help="the size of HERMES_HOME's tmpfs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # a SIGTERM (timeout(1), a CI's end) unwinds like Ctrl-C: the daemon, the fake provider and the
    # tmpfs of HERMES_HOME are cleaned up by the finally blocks, not left behind
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    result = run(args.cycles, args.seed, args.faults, args.fuzz, Scale.small() if args.small else Scale(),
                 args.disk_mib, log=lambda line: print(line, flush=True))
    print(json.dumps(result, default=str) if args.json else report(result), flush=True)
    return 1 if result["breaches"] else 0


__all__ = ["Soak", "main", "report", "run"]
