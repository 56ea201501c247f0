"""HumanEval's tests as a batch verifier: ``python3 humaneval.py --tests humaneval_tests.jsonl``.

Run by a batch item after its agent ends (``--verifier``, ``batch.verify``), in the
item's working directory: it reads the sample's ``task_id`` from ``HERMES_SAMPLE``
(the dataset line's fields) or ``--task-id``, the problem's ``test`` and
``entry_point`` from the tests file (one JSON object per line, as
``../shared/data/humaneval_tests.jsonl``), and grades ``solution.py`` the way
HumanEval's own harness grades a completion (human-eval's ``execution.py``,
https://github.com/openai/human-eval): the program ``solution + test +
check(entry_point)`` runs in a fresh interpreter (``-I``), in a directory of its
own, with a time limit; it passes when it exits 0.

Prints one JSON line ``{"reward": 1.0|0.0, "passed": bool, "task_id", "reason"}``
and exits 0 when the solution passes, 1 when it does not, 2 when it cannot grade
(no task id, an unknown task, an unreadable tests file).  The standard library
only: it runs wherever the item runs (in its container too, given a Python and
the tests file there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SOLUTION = "solution.py"
TIMEOUT_SECONDS = 10.0
"""The program's time limit (HumanEval's harness uses 3 s per problem on a quiet machine)."""


def problem(tests_file: str, task_id: str) -> dict:
    """The tests file's line of ``task_id``.  Raises ``LookupError`` or ``OSError``."""
    with open(tests_file, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                entry = json.loads(line)
                if entry.get("task_id") == task_id:
                    return entry
    raise LookupError(f"{tests_file} has no task {task_id!r}")


def grade(solution: str, entry: dict, timeout: float) -> tuple[bool, str]:
    """``(passed, reason)`` of ``solution`` (source text) against ``entry``'s test."""
    program = f"{solution}\n\n{entry['test']}\n\ncheck({entry['entry_point']})\n"
    with tempfile.TemporaryDirectory(prefix="humaneval-") as where:
        path = os.path.join(where, "program.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(program)
        try:
            done = subprocess.run([sys.executable, "-I", path], cwd=where, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout:g}s"
    if done.returncode == 0:
        return True, "passed"
    tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return False, (tail[-1] if tail else f"exit status {done.returncode}")[:300]


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc); returns the exit status."""
    parser = argparse.ArgumentParser(description="Grade solution.py with HumanEval's tests.")
    parser.add_argument("--tests", required=True, help="humaneval_tests.jsonl")
    parser.add_argument("--task-id", default=None, help="the task (default: HERMES_SAMPLE's fields.task_id)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_SECONDS)
    args = parser.parse_args(argv)
    task_id = args.task_id
    if task_id is None:
        try:
            task_id = (json.loads(os.environ.get("HERMES_SAMPLE") or "{}").get("fields") or {}).get("task_id")
        except ValueError:
            task_id = None
    if not task_id:
        print("humaneval: no task id (give --task-id, or run it as a batch verifier of a line with task_id)",
              file=sys.stderr)
        return 2
    try:
        entry = problem(args.tests, task_id)
    except (OSError, ValueError, LookupError) as exc:
        print(f"humaneval: {exc}", file=sys.stderr)
        return 2
    try:
        with open(SOLUTION, encoding="utf-8") as fh:
            solution = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        passed, reason = False, f"no readable {SOLUTION}: {exc.__class__.__name__}"
    else:
        passed, reason = grade(solution, entry, args.timeout)
    print(json.dumps({"reward": 1.0 if passed else 0.0, "passed": passed, "task_id": task_id, "reason": reason}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
