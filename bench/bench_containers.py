"""The cost of a container per job, beside the local terminal.

Two levels, in one run, with podman (``--runtime runc``) and the busybox test
image of ``tests/containers.py`` (imported if missing):

* the engine: ``run -d`` until a first ``exec true`` has returned (start to
  first command), a later ``exec true`` (one command), ``rm -f`` of the running
  container (removal), beside ``/bin/sh -c true`` started the way the local
  terminal starts it;
* a real hermesd: jobs of one ``true`` terminal call (scripted provider), one
  after the other, from the ``delegate`` request to the job's terminal state
  (the client waits), on the host and with ``image`` — the difference is what a
  container adds to a job (started when it starts, removed before it reports).

Usage::

    .venv/bin/python bench/bench_containers.py [--runs 10] [--json]

Without podman, runc and busybox-static it says what to install and measures nothing.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine, pct, summary  # noqa: E402
from child.container import ulimit_args  # noqa: E402
from tests.containers import APT_HINT, RUNTIME, ensure_image, podman, remove_under  # noqa: E402

LABEL = "hermes.state_dir"


def engine_series(engine: list[str], image: str, runs: int, scratch: Path) -> dict[str, list[float]]:
    """Seconds of each engine step (and of the local shell), ``runs`` times."""
    out: dict[str, list[float]] = {"local: /bin/sh -c true": [], "container: run -d to first exec": [],
                                   "container: one exec": [], "container: rm -f": []}
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(["/bin/sh", "-c", "true"], check=True, stdin=subprocess.DEVNULL)
        out["local: /bin/sh -c true"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        cid = subprocess.run([*engine, "run", "-d", "--stop-signal", "KILL", "--label", f"{LABEL}={scratch}",
                              "--network", "none", "--pull", "never", *ulimit_args(4096), "--mount",
                              f"type=bind,source={scratch},target=/workspace", "--entrypoint", "sleep", image,
                              "100000"], capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run([*engine, "exec", cid, "/bin/sh", "-c", "true"], check=True, stdin=subprocess.DEVNULL)
        out["container: run -d to first exec"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        subprocess.run([*engine, "exec", cid, "/bin/sh", "-c", "true"], check=True, stdin=subprocess.DEVNULL)
        out["container: one exec"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        subprocess.run([*engine, "rm", "-f", cid], check=True, capture_output=True)
        out["container: rm -f"].append(time.monotonic() - t0)
    return out


def job_series(d, runs: int, image: str | None) -> list[float]:
    """Seconds from ``delegate`` to the terminal state of a one-command job, ``runs`` jobs in a row."""
    conn = d.conn(timeout=120)
    script = [{"thinking": "I think it over.", "tool_calls": [{"name": "terminal", "input": {"command": "true"}}]}, {"text": "ok"}]
    times = []
    for i in range(runs + 1):
        t0 = time.monotonic()
        job = conn.call("delegate", goal=f"one command {i}", cwd=str(d.work), toolsets=["terminal"], script=script,
                        **({"image": image} if image else {}))["id"]
        answer = conn.call("wait", 120, id=job, timeout=110)
        assert answer["job"]["status"] == "completed", answer["job"]
        if i >= 1:  # the first warms the daemon's own paths
            times.append(time.monotonic() - t0)
    conn.close()
    return times


def run(runs: int) -> dict[str, list[float]] | None:
    """Every series, in seconds; None without podman."""
    engine = podman()
    if engine is None:
        return None
    with tempfile.TemporaryDirectory(prefix="hermes-bench-image-") as tmp:
        image = ensure_image(engine, Path(tmp))
        try:
            results = engine_series(engine, image, runs, Path(tmp))
        finally:
            remove_under(engine, Path(tmp))
    with daemon({"terminal": {"runtime": RUNTIME}}) as d:
        try:
            results["job, local terminal"] = job_series(d, runs, None)
            results["job, container terminal"] = job_series(d, runs, image)
        finally:
            remove_under(engine, d.base)
    return results


def report(results: dict[str, list[float]] | None) -> str:
    """The figures as text, the container's cost beside the local terminal."""
    lines = ["containers: the cost of a container per job (podman --runtime runc, busybox image)", machine()]
    if results is None:
        return "\n".join(lines + [f"  skipped: podman, runc and busybox-static are needed ({APT_HINT})"])
    for name, values in results.items():
        lines.append(f"  {name:<34} {summary(values, 50, 95)}")
    p50 = {name: pct(values, 50) for name, values in results.items()}
    added = p50["job, container terminal"] - p50["job, local terminal"]
    lines.append(f"  per job, a container adds {1000 * added:.0f} ms (p50): start to first command "
                 f"{1000 * p50['container: run -d to first exec']:.0f} ms, removal "
                 f"{1000 * p50['container: rm -f']:.0f} ms; each later command "
                 f"{p50['container: one exec'] / p50['local: /bin/sh -c true']:.0f}x a local one")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, lambda results, args: report(results), runs=10)
