"""The cost of a git worktree per job, beside a job in the checkout itself.

Two levels, in one run, on a temporary repository of ``--files`` files (a small project):

* git: ``git worktree add -b`` of a new branch (what the child runs before its agent starts) and
  ``git worktree remove`` with ``branch -D`` (what the daemon runs once a clean job ended), under
  :mod:`hermesd.worktrees.git` as the child and the daemon call it;
* a real hermesd: jobs of one ``true`` terminal call (scripted provider), one after the other, from
  the ``delegate`` request to the job's terminal state (the client waits), in the checkout and with
  ``worktree: true`` — the difference is what a worktree adds to a job (made before its agent,
  inspected when it ends) — and, for the latter, from the terminal state until ``worktrees`` says
  the clean worktree is removed (the daemon's worker thread).

Usage::

    .venv/bin/python bench/bench_worktrees.py [--runs 10] [--files 2000] [--json]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine, pct, summary, wait_for  # noqa: E402
from hermesd.worktrees import git as wt  # noqa: E402


def make_repo(base: Path, files: int) -> Path:
    """A repository of ``files`` small files in 20 directories, one commit."""
    repo = base / "repo"
    for i in range(files):
        path = repo / f"pkg{i % 20}" / f"module_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n" * 20)
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.com", "PATH": "/usr/bin:/bin"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    return repo


def git_series(repo: Path, runs: int) -> dict[str, list[float]]:
    """Seconds of ``worktree add`` and of the removal of a clean worktree with its branch, ``runs`` times."""
    out: dict[str, list[float]] = {"git: worktree add -b": [], "git: inspect, remove, branch -D": []}
    for i in range(runs):
        plan = wt.plan(str(repo), f"bench{i}", repo.parent / "worktrees")
        t0 = time.monotonic()
        wt.create(plan)
        out["git: worktree add -b"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        assert not wt.inspect(plan)["changed"]
        wt.remove(plan)
        out["git: inspect, remove, branch -D"].append(time.monotonic() - t0)
    return out


def job_series(d, repo: Path, runs: int, worktree: bool) -> tuple[list[float], list[float]]:
    """Seconds from ``delegate`` to the terminal state of a one-command job, ``runs`` jobs in a row
    (and, with ``worktree``, from there until its clean worktree is removed)."""
    conn = d.conn(timeout=120)
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "true"}}]}, {"text": "ok"}]
    times, removals = [], []
    for i in range(runs + 1):
        t0 = time.monotonic()
        job = conn.call("delegate", goal=f"one command {i}", cwd=str(repo), toolsets=["terminal"], script=script,
                        worktree=worktree)["id"]
        answer = conn.call("wait", 120, id=job, timeout=110)
        assert answer["job"]["status"] == "completed", answer["job"]
        ended = time.monotonic()
        if worktree:
            wait_for(lambda: any(w["job"] == job and w["state"] == "removed"
                                 for w in conn.call("worktrees", all=True)["worktrees"]), 60, 0.005)
        if i >= 1:  # the first warms the daemon's own paths
            times.append(ended - t0)
            if worktree:
                removals.append(time.monotonic() - ended)
    conn.close()
    return times, removals


def run(runs: int, files: int) -> dict[str, list[float]]:
    """Every series, in seconds."""
    with tempfile.TemporaryDirectory(prefix="hermes-bench-worktree-") as tmp:
        repo = make_repo(Path(tmp), files)
        results = git_series(repo, runs)
        with daemon() as d:
            results["job, in the checkout"] = job_series(d, repo, runs, False)[0]
            results["job, worktree: true"], results["job end to worktree removed"] = job_series(d, repo, runs, True)
    return results


def report(results: dict[str, list[float]], files: int) -> str:
    """The figures as text, the worktree's cost beside a job in the checkout."""
    lines = [f"worktrees: the cost of a git worktree per job (a repository of {files} files)", machine()]
    for name, values in results.items():
        lines.append(f"  {name:<34} {summary(values, 50, 95)}")
    added = pct(results["job, worktree: true"], 50) - pct(results["job, in the checkout"], 50)
    lines.append(f"  per job, a worktree adds {1000 * added:.0f} ms (p50) before its result; its removal after "
                 f"{1000 * pct(results['job end to worktree removed'], 50):.0f} ms (p50, off the loop)")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, lambda results, args: report(results, args.files), runs=10, files=2000)
