"""Verifiers, the daemon's side: what an item is asked to run, and the scores its line keeps.

A run's ``--verifier CMD`` (or a dataset line's ``verifier`` field, which wins) is
run by the item after its agent ends (``child.verify``: in the item's working
directory, in its container when it has one, at most ``--verifier_timeout``
seconds).  It learns which sample it judges from ``HERMES_SAMPLE`` in its
environment, a JSON object ``{"prompt_index", "group_id", "attempt", "run_name",
"fields"}`` (``fields``: the dataset line's other fields, e.g. HumanEval's
``task_id``).

A trajectory line keeps ``reward`` (a float, or None without a verifier or when it
failed) and ``verifier`` (None without one, else ``{command, passed, reward,
exit_status, details, output, error, seconds}``: ``child.verify``).
"""

from __future__ import annotations

import json
from typing import Any

from hermesd.contract.wire import JobResult

DEFAULT_TIMEOUT_SECONDS = 60.0
"""The verifier's time limit when ``--verifier_timeout`` is not given."""

SAMPLE_ENV = "HERMES_SAMPLE"
"""The environment variable that tells a verifier its sample (see the module doc)."""


def item_verifier(command: str | None, timeout: float, sample: dict[str, Any]) -> dict[str, Any] | None:
    """The item spec's ``verifier`` (``child.verify``) for ``command`` (None: no verifier)
    and ``sample`` (what :data:`SAMPLE_ENV` holds)."""
    if not command:
        return None
    return {"command": command, "timeout_seconds": float(timeout),
            "env": {SAMPLE_ENV: json.dumps(sample, ensure_ascii=False, sort_keys=True)}}


def scores(result: JobResult) -> dict[str, Any]:
    """``{"reward", "verifier"}`` of a line from an item's ``result`` (see the module doc)."""
    found = result.verifier
    if not isinstance(found, dict):
        return {"reward": None, "verifier": None}
    reward = found.get("reward")
    verdict = {"command": str(found.get("command") or ""),
               "passed": found["passed"] if isinstance(found.get("passed"), bool) else None,
               "reward": float(reward) if isinstance(reward, (int, float)) else None,
               "exit_status": found["exit_status"] if isinstance(found.get("exit_status"), int) else None,
               "details": found.get("details") if isinstance(found.get("details"), dict) else {},
               "output": str(found.get("output") or ""), "error": found.get("error") and str(found["error"]),
               "seconds": float(found.get("seconds") or 0.0)}
    return {"reward": verdict["reward"], "verifier": verdict}
