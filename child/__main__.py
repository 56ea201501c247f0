"""Entry point of a child process: ``python -m child``.

Order matters: put the output under the log's cap (:mod:`child.logwriter`), arm
the lifeline (PDEATHSIG + parent check), then name
the process, then install the interrupt handlers, then fetch the job spec, make
the job's git worktree when it has one (:mod:`child.worktree`), and
run the entry point its kind names (``JobSpec.entry``, from ``hermesd.jobs.JobKind.entry``:
the agent, :mod:`child.agent`; a batch's Ray driver, :mod:`child.ray_driver`…).  Whatever happens, one ``child.result`` is sent
before exit: to hermesd on ``children.sock``, or, for a batch item started by a
Ray task (``HERMES_ITEM_DIR``, :mod:`child.item`), into that directory.
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

from child import lifeline, logwriter, redact, worktree
from hermesd.contract.wire import JobResult, JobSpec
from hermesd.private import restore_umask


class StopFlag:
    """Set by SIGINT/SIGTERM: the agent stops after its current step.

    ``reason`` is a short text (``"SIGINT"``, ``"SIGTERM"``, ``"timeout"``).
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        """Request the stop, keeping the first reason given."""
        if self.reason is None:
            self.reason = reason
        self.event.set()

    def is_set(self) -> bool:
        """True once a stop was requested."""
        return self.event.is_set()


def _title(job: str, spec: JobSpec | None = None) -> None:
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a declared dependency
        return
    if spec is None:
        setproctitle.setproctitle(f"hermes-child {job}")
        return
    from hermesd.protocol import one_line

    goal = one_line(spec.goal)[:80]
    setproctitle.setproctitle(f"hermes-child {job} {spec.kind} {goal}".rstrip())


def entry_point(entry: str) -> Callable[[JobSpec, Any, StopFlag], JobResult]:
    """The function ``module:function`` names (a kind's ``JobKind.entry``), imported.  Raises
    ``ValueError`` for a name of another form, ``ImportError``/``AttributeError`` for one that is not there."""
    module, sep, name = entry.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"entry point {entry!r} is not module:function")
    return getattr(importlib.import_module(module), name)


def prepare() -> None:
    """Warm start: what a spare does before it has a job (see :mod:`child.spare`).

    Arms the lifeline against ``HERMES_DAEMON_PID`` (its watchdog thread is
    started here, not on the job's path) and connects to the daemon's
    ``HERMES_CHILD_SOCKET``, so the job's ``child.hello`` leaves at once (a spare
    of a Ray worker's template, :mod:`child.item_warm`, has no such socket).
    Raises ``zmq.ZMQError``, ``KeyError`` or ``ValueError`` (a variable missing
    or wrong); the spare then goes on without, and :func:`main` does it.
    """
    from child.channel import preconnect

    lifeline.arm(int(os.environ["HERMES_DAEMON_PID"]))
    if "HERMES_CHILD_SOCKET" in os.environ:
        preconnect(os.environ["HERMES_CHILD_SOCKET"])


def main() -> int:
    """Run the job named by ``HERMES_JOB_ID``; returns the process exit status.  Its output
    (and that of all it starts) reaches the job's log under the log's cap (:mod:`child.logwriter`)."""
    capped = logwriter.capture()
    try:
        return _run(capped.file if capped is not None else sys.stderr)
    finally:
        if capped is not None:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            capped.close()


def _run(crash_log: Any) -> int:
    job = os.environ.get("HERMES_JOB_ID", "")
    lifeline.arm(lifeline.serves())
    redact.install()  # the job's log and all it sends hold no secret value
    restore_umask()  # the daemon's is 077; the tools write with the user's
    faulthandler.enable(crash_log)  # a crash in native code (llama.cpp) leaves the Python stack in the job's log
    _title(job)  # first: setproctitle finds its room next to the environment as the kernel left it
    redact.hide_from_proc()  # the /proc/PID/environ its tools can read holds no key
    stop = StopFlag()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.set(signal.Signals(signum).name))

    if os.environ.get("HERMES_ITEM_DIR"):  # a batch item started by a Ray task (child.item)
        from child.item import FileChannel

        channel = FileChannel(os.environ["HERMES_ITEM_DIR"])
    else:
        from child.channel import Channel

        channel = Channel(os.environ["HERMES_CHILD_SOCKET"], job, os.environ.get("HERMES_CHILD_TOKEN", ""))
    started = time.monotonic()
    spec = None
    try:
        spec = JobSpec.from_wire(channel.call("child.hello", pid=os.getpid()))
        _title(job, spec)
        worktree.enter(spec)
        result = entry_point(spec.entry)(spec, channel, stop)
    except BaseException as exc:  # noqa: BLE001 - report every failure, then exit
        interrupted = stop.is_set() or isinstance(exc, KeyboardInterrupt)
        result = JobResult(status="interrupted" if interrupted else "failed",
                           exit_reason="interrupted" if interrupted else "error",
                           error=str(exc) if isinstance(exc, worktree.WorktreeError) else
                           f"{exc.__class__.__name__}: {exc}", traceback=traceback.format_exc(limit=20),
                           duration_seconds=time.monotonic() - started)
        print(result.traceback, file=sys.stderr, flush=True)
    result.worktree = worktree.report(spec)
    try:
        channel.call("child.result", timeout=10.0, **result.to_wire())
    except Exception as exc:  # noqa: BLE001 - the daemon may be gone; the log keeps it
        print(f"hermes-child {job}: could not report result: {exc}", file=sys.stderr, flush=True)
        channel.close()
        return 1
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
