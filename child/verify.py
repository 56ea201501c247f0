"""A batch item's verifier: a command run after the agent ends, whose verdict is the sample's reward.

The spec's ``verifier`` (set by the batch job type, ``batch.verify``) is
``{"command": str, "timeout_seconds": float, "env": {name: value}}``.  The
command runs as the ``terminal`` tool runs its commands (:func:`child.tools.terminal.run_shell`):
``/bin/sh -c COMMAND`` in the item's working directory — inside the item's
container when it has one —, killed with everything it started at the time limit
or when the job is asked to stop; ``env`` is added to its environment
(``HERMES_SAMPLE``: the sample as JSON, see ``batch.verify.sample_env``).

The verdict (the convention of test-based graders such as HumanEval's harness):

* the last line of its output that is a JSON object with a number ``reward`` gives
  the reward, and its ``passed`` (a boolean) whether the sample passes — else the
  exit status does (0 passes); the object's other keys are kept as ``details``;
* without such a line, exit status 0 is reward 1.0 and passes, any other 0.0.

A verifier that cannot run, times out, is killed by a signal or prints a ``reward``
that is not a number has an ``error`` and no reward: the sample's error, never
the run's (its line is still written; the batch counts it).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from child.tools import ToolContext, ToolError

OUTPUT_CHARS = 4000
"""The verifier's output kept in the result: its last this-many characters (the verdict is at the end)."""


def verdict(output: str, returncode: int) -> dict[str, Any]:
    """``{passed, reward, exit_status, details, error}`` of a verifier that printed
    ``output`` and exited with ``returncode`` (negative: killed by that signal);
    see the module doc."""
    found: dict[str, Any] | None = None
    for raw in reversed(output.splitlines()):
        text = raw.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                obj = json.loads(text)
            except ValueError:
                continue
            if isinstance(obj, dict) and "reward" in obj:
                found = obj
                break
    base = {"exit_status": returncode, "details": {}, "error": None}
    if returncode < 0:
        return {**base, "passed": None, "reward": None, "error": f"the verifier was killed by signal {-returncode}"}
    if found is None:
        return {**base, "passed": returncode == 0, "reward": 1.0 if returncode == 0 else 0.0}
    reward = found.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return {**base, "passed": None, "reward": None,
                "error": f"the verifier printed a reward that is not a finite number: {reward!r}"}
    passed = found.get("passed")
    details = {k: v for k, v in found.items() if k not in ("reward", "passed")}
    return {**base, "passed": passed if isinstance(passed, bool) else returncode == 0, "reward": float(reward),
            "details": details}


def run(verifier: dict[str, Any], ctx: ToolContext, shown: Any = None) -> dict[str, Any]:
    """Run ``verifier`` (see the module doc) with the tool context ``ctx``; returns
    ``{command, passed, reward, exit_status, details, output, error, seconds}``
    (``output``: its last :data:`OUTPUT_CHARS` characters; every string of it, ``details`` and
    ``command`` included, through ``shown(text)`` when given — e.g. the working directory masked).  Never raises for the verifier's
    own failures."""
    from child.tools.terminal import run_shell

    command = str(verifier.get("command") or "")
    started = time.monotonic()
    try:
        output, returncode = run_shell(command, ctx, float(verifier.get("timeout_seconds") or 60.0),
                                       {str(k): str(v) for k, v in (verifier.get("env") or {}).items()})
        result = verdict(output, returncode)
    except ToolError as exc:
        output = str(exc)
        result = {"passed": None, "reward": None, "exit_status": None, "details": {},
                  "error": f"the verifier did not finish: {output.splitlines()[0].strip('[]')}"}
    tail = output[-OUTPUT_CHARS:]
    outcome = {"command": command, **result, "output": tail, "seconds": round(time.monotonic() - started, 3)}
    return _masked(outcome, shown) if shown else outcome


def _masked(value: Any, shown: Any) -> Any:
    """``value`` with every string in it (the command, the output, the verifier's own JSON
    ``details`` and ``error``, keys too) passed through ``shown``: no host path in a line."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {_masked(k, shown): _masked(v, shown) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, shown) for v in value]
    return value
