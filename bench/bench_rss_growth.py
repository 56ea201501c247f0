"""Does the daemon's memory grow with the jobs it ran?  One daemon, round after round of a soak cycle's work.

The soak (:mod:`bench.soak`) compares the daemon's RSS after its first cycle with its RSS after the
last, but faults restart the daemon on the way, so the two figures are of different processes.
Here one daemon (the soak's: forkserver, the fake Messages API answered by
:mod:`bench.soak.brain`) runs ``--rounds`` rounds of a soak cycle's work without faults (a batch of
``--prompts`` prompts, background delegations with terminal commands, jobs with budgets and
approvals, session turns and errands, a Kanban chain; :class:`bench.soak.workload.Workload`), each
round waited on until everything settled (the soak's wait: every page of ``ps --all`` twice a second).
After each round: the daemon's RSS and its anonymous part (``RssAnon`` of ``/proc/PID/status``: no
code, no files), the jobs it keeps, its threads and open descriptors, and what a probe in the daemon
says (a ``sitecustomize`` on its ``PYTHONPATH``, run by the daemon's interpreter only, not its
children's; no switch of hermesd's; asked with ``SIGUSR2``, answered in a file): glibc's
``mallinfo2()`` (memory in use, free in its heaps) and SQLite's ``sqlite3_memory_used()`` (its page
cache, schema and statements: part of malloc's in use).  ``rest``, what is anonymous but neither, is
mostly Python's own allocator (``pymalloc``'s 1 MiB arenas) and the threads' stacks (about: free
heap memory given back to the kernel is counted as free, not resident).

``--trace N`` also starts ``tracemalloc`` (``N`` frames) in the daemon: then each probe gives the
traced Python memory and its peak since the probe before, and the lines whose allocations grew most
from round 1 to the last are listed (with ``N`` > 1, the calls that led to each, outermost first),
with the types whose live objects grew.  Tracing slows the daemon and costs memory of its own (the
snapshots' too): the RSS of a traced run is not a plain run's.  Usage::

    .venv/bin/python bench/bench_rss_growth.py [--rounds 12] [--prompts 100] [--trace 0] [--json]
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, command_line, machine, wait_for  # noqa: E402
from bench.soak import Soak  # noqa: E402
from bench.soak.workload import Approver, Scale  # noqa: E402

MB = 2**20
HOOK = """\
import sys
if "hermesd.daemon" in getattr(sys, "orig_argv", ()):
    import signal, tracemalloc
    if {frames}:
        tracemalloc.start({frames})

    def _probe(_signum, _frame, _count=[0]):
        import collections, ctypes, gc, os, pickle, _sqlite3
        _count[0] += 1
        path = os.path.join({folder!r}, "probe-%d" % _count[0])
        fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                  "fordblks", "keepcost")
        info = type("mallinfo2", (ctypes.Structure,), {{"_fields_": [(f, ctypes.c_size_t) for f in fields]}})
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = info
        sqlite = ctypes.CDLL(_sqlite3.__file__)
        sqlite.sqlite3_memory_used.restype = sqlite.sqlite3_memory_highwater.restype = ctypes.c_int64
        heap = libc.mallinfo2()
        data = {{"malloc": {{f: getattr(heap, f) for f in fields}}, "sqlite": sqlite.sqlite3_memory_used(),
                 "sqlite_highwater": sqlite.sqlite3_memory_highwater(0),
                 "threads": len(os.listdir("/proc/self/task"))}}
        if tracemalloc.is_tracing():
            gc.collect()
            data["traced"], data["peak"] = tracemalloc.get_traced_memory()  # before the snapshot's own objects
            data.update(snapshot=tracemalloc.take_snapshot(),
                        types=dict(collections.Counter(type(o).__qualname__ for o in gc.get_objects())))
        with open(path + ".tmp", "wb") as out:
            pickle.dump(data, out)
        os.rename(path + ".tmp", path)
        if tracemalloc.is_tracing():
            del data
            tracemalloc.reset_peak()  # after the snapshot was pickled and dropped: the next peak is the work's

    signal.signal(signal.SIGUSR2, _probe)
"""
"""The daemon's ``sitecustomize``: on each ``SIGUSR2`` a probe written to a file: glibc's
``mallinfo2()`` (in use, free in the heap, mapped), SQLite's ``sqlite3_memory_used()`` and its high
water, the threads; with ``--trace``, ``tracemalloc`` from the interpreter's start and, after a
collection, a snapshot, the peak of the traced memory since the last probe and the count of live
objects by type."""


def anon_mib(pid: int) -> float:
    """``RssAnon`` of process ``pid`` (its heap and anonymous mappings: no code, no files), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


def probe(soak: Soak, folder: Path, count: int) -> dict[str, Any]:
    """The daemon's ``count``-th probe (see :data:`HOOK`), asked for and read back."""
    path = folder / f"probe-{count}"
    os.kill(soak.d.proc.pid, signal.SIGUSR2)
    wait_for(path.exists, 120, 0.1, f"the daemon's probe {count}")
    with open(path, "rb") as data:
        return pickle.load(data)


def run(rounds: int, prompts: int, trace: int) -> dict[str, Any]:
    """``rounds`` rounds on one daemon; the footprint after each (and with ``trace``, the growth by line)."""
    rows: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hermes-rss-") as tmp:
        soak = Soak(Path(tmp), 0, Scale(prompts=prompts), lambda line: None, 192)
        hook = Path(tmp) / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(HOOK.format(frames=trace, folder=str(hook)))
        soak.d.env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(hook), soak.d.env.get("PYTHONPATH"))))
        approver = None
        try:
            soak.d.start(120.0)
            soak.workload.setup()
            approver = Approver(soak.d)
            time.sleep(2.0)
            started = time.monotonic()
            for cycle in range(rounds + 1):
                if cycle:
                    soak.workload.cycle(cycle - 1)
                    soak.settle(600.0)
                rows.append(footprint(soak, cycle, time.monotonic() - started))
                probes.append(probe(soak, hook, cycle + 1))
                rows[-1].update(measured(probes[-1]))
                started = time.monotonic()
        finally:
            if approver is not None:
                approver.stop()
            soak.close()
    result: dict[str, Any] = {"rounds": rows, "prompts": prompts, "trace": trace, "problems": soak.problems}
    if trace and len(probes) >= 3:
        result["growth"] = growth(probes[1], probes[-1])
    return result


def measured(found: dict[str, Any]) -> dict[str, Any]:
    """What a probe says, in MiB: malloc's memory in use and free in its heaps, SQLite's share of
    what is in use (and its high water), Python's traced memory (with ``--trace``); the threads."""
    heap = found["malloc"]
    row = {"malloc_used_mib": (heap["uordblks"] + heap["hblkhd"]) / MB, "malloc_free_mib": heap["fordblks"] / MB,
           "sqlite_mib": found["sqlite"] / MB, "sqlite_peak_mib": found["sqlite_highwater"] / MB,
           "threads": found["threads"]}
    if "traced" in found:
        row["traced_mib"], row["peak_mib"] = found["traced"] / MB, found["peak"] / MB
    return row


def footprint(soak: Soak, cycle: int, seconds: float) -> dict[str, Any]:
    """The daemon's RSS, ``RssAnon`` (MiB), open descriptors and jobs kept, after round ``cycle``."""
    pid = soak.d.proc.pid
    proc = psutil.Process(pid)
    return {"round": cycle, "seconds": seconds, "rss_mib": proc.memory_info().rss / MB, "anon_mib": anon_mib(pid),
            "fds": proc.num_fds(), "jobs": sum(soak.call("status")["jobs"].values())}


def growth(first: dict[str, Any], last: dict[str, Any], top: int = 15) -> dict[str, Any]:
    """What grew from snapshot ``first`` to ``last``: the ``top`` lines by bytes, and object types by count."""
    stats = last["snapshot"].compare_to(first["snapshot"], "traceback")
    lines = [{"where": " > ".join(short(f) for f in s.traceback), "bytes": s.size_diff,
              "blocks": s.count_diff, "size": s.size} for s in stats[:top]]
    types = sorted(((name, count - first["types"].get(name, 0)) for name, count in last["types"].items()),
                   key=lambda item: -item[1])
    return {"lines": lines, "types": [t for t in types[:top] if t[1] > 0], "traced": [first["traced"], last["traced"]]}


def short(frame: Any) -> str:
    """A traceback frame as ``path:line``, the path from the checkout or ``site-packages``."""
    name = frame.filename
    for root in (str(ROOT) + os.sep, "site-packages" + os.sep, "lib" + os.sep):
        name = name.split(root, 1)[-1]
    return f"{name}:{frame.lineno}"


def report(result: dict[str, Any], _args: Any = None) -> str:
    """The figures as text."""
    rows = result["rounds"]
    traced = result["trace"] > 0
    lines = [f"daemon memory, round after round of a soak cycle's work ({result['prompts']}-prompt batch, no faults)"
             + (f", tracemalloc {result['trace']} frame(s)" if traced else ""), machine(),
             "  round  seconds  jobs kept  RSS MiB  anon MiB  malloc used  malloc free  rest  SQLite (peak)  threads  fds"
             + ("  traced MiB (peak)" if traced else "")]
    for row in rows:
        lines.append(f"  {row['round']:>5}  {row['seconds']:>7.1f}  {row['jobs']:>9,}  {row['rss_mib']:>7.1f}  "
                     f"{row['anon_mib']:>8.1f}  {row['malloc_used_mib']:>11.1f}  {row['malloc_free_mib']:>11.1f}  "
                     f"{row['anon_mib'] - row['malloc_used_mib'] - row['malloc_free_mib']:>4.1f}  "
                     f"{row['sqlite_mib']:>5.1f} ({row['sqlite_peak_mib']:>4.1f})  {row['threads']:>7}  {row['fds']:>3}"
                     + (f"  {row['traced_mib']:>10.2f} ({row['peak_mib']:.2f})" if traced else ""))
    if len(rows) > 2:
        one, end = rows[1], rows[-1]
        per = (end["rss_mib"] - one["rss_mib"]) / max(1, end["jobs"] - one["jobs"]) * 1024
        lines.append(f"  after round 1 -> after round {end['round']}: RSS {one['rss_mib']:.1f} -> {end['rss_mib']:.1f} "
                     f"MiB ({per:+.2f} KiB per job kept)")
    if result.get("growth"):
        g = result["growth"]
        lines.append(f"  traced Python memory, after round 1 -> after the last: {g['traced'][0] / MB:.2f} -> "
                     f"{g['traced'][1] / MB:.2f} MiB; grew most, by line:")
        lines += [f"    {s['bytes'] / 1024:>+9.1f} KiB {s['blocks']:>+7} blocks  {s['where']}" for s in g["lines"]]
        lines.append("  live objects that grew, by type: " + ", ".join(f"{n} {c:+}" for n, c in g["types"]))
    lines += [f"  problem: {p}" for p in result["problems"]]
    return "\n".join(lines)


if __name__ == "__main__":
    # a SIGTERM unwinds like Ctrl-C, as the soak's does: the daemon, the fake provider and the soak's tmpfs of
    # HERMES_HOME are cleaned up by the finally blocks, not left behind
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    command_line(__doc__, run, report, rounds=12, prompts=100, trace=0)
