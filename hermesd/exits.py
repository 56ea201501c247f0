"""What a job's unhappy end is told as: a crash, a timeout the daemon enforced.

The daemon knows what a child was doing from its ``child.progress`` reports
(:class:`Doing`: the ``activity`` text, such as "waiting for the model's first
reply" or "in tool terminal running `pytest -x`", the provider and model, the
model calls completed).  From that and the process's exit status this module
writes the job's ``error``: never a bare "status -11", always what died, how,
while doing what, and what to do about it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from hermesd.protocol import doing_text, timed_out_text

LOCAL_PROVIDER = "local"
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT}
"""Signals a process gets from its own code going wrong (as opposed to being stopped)."""

LOCAL_MODEL_HINT = (
    "the embedded local model (SmolLM2-135M-Instruct through llama.cpp, provider `local`) crashed "
    "in native code; what to do: reinstall llama-cpp-python as a portable build "
    "(CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install --force-reinstall --no-cache-dir llama-cpp-python; "
    "`bash .ci/run` and `bash demo.sh` check the build and do this themselves), or use another model "
    "(ANTHROPIC_API_KEY, or provider and base_url in config.yaml); see docs/operations.md, "
    "\"The embedded model\""
)


@dataclass
class Doing:
    """The last thing a child said it was doing (its ``child.progress`` reports)."""

    activity: str | None = None
    provider: str | None = None
    model: str | None = None
    api_calls: int = 0

    def update(self, report: dict) -> None:
        """Take the fields of one ``child.progress`` report (others are ignored)."""
        for key in ("activity", "provider", "model"):
            if isinstance(report.get(key), str):
                setattr(self, key, report[key])
        if isinstance(report.get("api_calls"), int):
            self.api_calls = report["api_calls"]

    def where(self) -> str:
        """``"waiting for the model's first reply (0 model calls completed)"``, or ``""``."""
        return doing_text(self.activity, self.api_calls)


def signal_name(returncode: int | None) -> str | None:
    """``"SIGSEGV"`` for a return code of -11 (killed by a signal), else ``None``."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def exit_error(returncode: int | None, doing: Doing, provider: str | None) -> str:
    """The ``error`` of a job whose process ended without reporting a result.

    ``provider``: the job's provider when the child did not report one.  A crash
    signal while the local model was in use adds :data:`LOCAL_MODEL_HINT`.
    """
    name = signal_name(returncode)
    text = (f"child process killed by {name} (exit status {returncode})" if name
            else f"child exited with status {returncode}")
    where = doing.where()
    text += f" while {where}" if where else ""
    text += " before reporting a result"
    if name and -returncode in CRASH_SIGNALS and (doing.provider or provider) == LOCAL_PROVIDER:
        text += f": {LOCAL_MODEL_HINT}"
    return text


def timeout_error(seconds: float, doing: Doing) -> str:
    """``"timed out after 600 s in tool terminal running `pytest -x` (3 model calls completed)"``."""
    return timed_out_text(seconds, doing.activity, doing.api_calls)
