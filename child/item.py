"""One batch item as an OS process of its own, started by an item host on a worker node.

:func:`run_item` is the body of one item of a host (:class:`child.item_host.ItemHost`,
a Ray actor the driver :mod:`child.ray_driver` starts; this module imports no Ray).  It
does not run the agent in the long-lived Ray worker process: it starts ``python -m
child`` in a new session (its own process group, so nothing the item does or kills
reaches the host), with

* ``HERMES_LIFELINE_PID`` = the host's pid: the item's lifeline serves the process
  that started it (hermesd is on another machine, or at least not its parent); when
  the host dies (its node lost, its driver gone) the item dies by ``PDEATHSIG`` and
  takes its group along;
* ``HERMES_ITEM_DIR`` = a scratch directory holding ``spec.json``; the item's
  channel (:class:`FileChannel`) answers ``child.hello`` from it and writes the
  ``child.result`` to ``result.json``; its progress and its model calls' grants go to
  hermesd through the driver's relay (:mod:`child.relay`; address, handle and token in
  ``relay.json``, read and removed at once);
* a warm start: a spare of the host's own warm template (:mod:`child.item_warm`;
  the host's first item starts it and waits for it), still a child of the host in a
  session of its own; cold only when the template fails;
* the provider's settings from the driver's environment (:data:`FORWARDED_ENV`),
  passed as an argument of the call — never as Ray's ``runtime_env``, which Ray shows in
  its state API and logs.

The host stops a cancelled item (SIGINT, then SIGKILL to its group after ``grace``
seconds; :meth:`child.item_host.ItemHost.cancel`, through ``on_start``): that is also
how hermesd's stale rule stops a quiet item; a ``KeyboardInterrupt`` in
:func:`run_item` stops it the same way.  With a ``timeout_seconds``, an item still
running ``timeout_seconds`` + 5 s after it started (its own wall clock failed) is
stopped the same way and reported ``timed_out``; without one, no clock limits it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from typing import Any, Callable

from child import redact
from child.item_warm import start_warm
from child.providers.scripted import STEP_SECONDS_ENV
from child.relay import RELAYED
from hermesd.contract.launch import PYTHON
from hermesd.contract.providers import PROVIDER_TABLE
from hermesd.contract.wire import JobResult
from hermesd.protocol import ProtocolError

FORWARDED_ENV = (*(v for p in PROVIDER_TABLE for v in p.env), "HERMES_WEB_SEARCH_URL", STEP_SECONDS_ENV)
"""The environment variables that carry provider settings (keys, base URLs: each provider's
``env`` in :data:`hermesd.contract.providers.PROVIDER_TABLE`; the scripted provider's step time), and the
web tools' search URL to items on other machines."""

DROPPED_ENV = ("HERMES_DAEMON_PID", "HERMES_CHILD_SOCKET", "HERMES_CHILD_TOKEN", "HERMES_SUPERVISOR", "HERMES_JOB_ID",
               "HERMES_ZYGOTE_OF")
"""Variables of the host's environment an item must not inherit (they name another process's daemon)."""

LOG_TAIL_BYTES = 800
"""How much of its log's end an item that reported no result quotes in its error."""
LOG_KEPT_BYTES = 128 * 1024
"""How much of its log's end an item's outcome carries back (``log``): hermesd keeps it as the
``ray_item`` job's log (``hermesctl logs rayitem_…``), as a local child's is ``jobs/ID/log``."""
RELAY_FILE = "relay.json"
SCRATCH_PREFIX = "hermes-item-"
"""An item's scratch directory is ``$TMPDIR/hermes-item-<host pid>-<random>``: its host removes
it when the item ends, and a later host on the node (:func:`sweep_scratch`) when its host died first."""


class FileChannel:
    """The channel of an item started by :func:`run_item` (``directory``: its ``HERMES_ITEM_DIR``).

    Same calls as :class:`child.channel.Channel`: ``child.hello`` returns the spec
    from ``spec.json``, ``child.result`` writes ``result.json`` (atomically);
    progress and grants (:data:`child.relay.RELAYED`) go to the driver's relay when
    ``relay.json`` named one (else progress is dropped and a grant refused: the
    child paces itself); any other op (delegation, Kanban) raises
    :class:`ProtocolError` (``bad_request``): there is no hermesd to ask.
    """

    def __init__(self, directory: str):
        self.directory = directory
        self.relay = None
        path = os.path.join(directory, RELAY_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                where = json.load(fh)
            os.unlink(path)  # the token is in this process only: the item's tools cannot read it
        except (OSError, ValueError):
            return
        from child.channel import Channel

        self.relay = Channel(where["address"], where["item"], where["token"])

    def call(self, op: str, /, timeout: float | None = None, **args: Any) -> Any:
        """Answer ``op`` locally, or through the relay (see the class doc)."""
        if op in RELAYED and self.relay is not None:
            return self.relay.call(op, timeout=timeout, **args)
        if op == "child.hello":
            with open(os.path.join(self.directory, "spec.json"), encoding="utf-8") as fh:
                spec = json.load(fh)
            self.notify("child.progress", activity=f"started on {socket.gethostname()}")  # it is up: running
            return spec
        if op == "child.result":
            path = os.path.join(self.directory, "result.json")
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                json.dump(redact.current().data(args), fh, ensure_ascii=False, default=str)
            os.replace(path + ".tmp", path)
            return {}
        raise ProtocolError("bad_request", f"{op} is not available to a batch item on a Ray cluster")

    def notify(self, op: str, /, **args: Any) -> None:
        """Progress and a grant's report: to the relay (dropped without one)."""
        if op in RELAYED and self.relay is not None:
            self.relay.notify(op, **args)

    def close(self) -> None:
        """Close the relay's connection (what it holds is sent first, for up to its linger time)."""
        if self.relay is not None:
            self.relay.close()


def sweep_scratch() -> int:
    """Remove the scratch directories of items whose host process is gone (killed with its
    driver, its node's raylet or ``kill -9``: no ``finally`` ran), that this user owns;
    returns how many.  A directory whose pid runs again (reused) is left for a later sweep."""
    root, removed = tempfile.gettempdir(), 0
    try:
        names = [n for n in os.listdir(root) if n.startswith(SCRATCH_PREFIX)]
    except OSError:
        return 0
    for name in names:
        pid, _, rest = name[len(SCRATCH_PREFIX):].partition("-")
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not pid.isdigit() or not rest or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its host (or a process of that pid) runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _tail(path: str, size: int = LOG_TAIL_BYTES) -> str:
    """The last ``size`` bytes of the file at ``path`` as text ("" when there is none)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGINT to the item, then SIGKILL to its process group after ``grace`` seconds."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def run_item(handle: str, index: int, spec: dict[str, Any], provider_env: dict[str, str],
             grace: float = 3.0, relay: dict[str, str] | None = None,
             on_start: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """Run the item ``handle`` (prompt ``index``, job ``spec`` as a child receives it)
    as its own process; returns its outcome: ``handle, index, status, result`` (the
    child's result map or None), ``error``, ``started_at`` and ``completed_at`` (seconds since the epoch), ``node`` (host name),
    ``log`` (the end of the item's log, :data:`LOG_KEPT_BYTES` at most; absent when it did not start).
    ``provider_env``: :data:`FORWARDED_ENV` values of the driver; ``relay``: the driver's
    relay for this item (``address, item, token``: :meth:`child.relay.Relay.admit`), or None;
    ``on_start``: called with the item's process once it runs (its ``pid``, ``send_signal``:
    how :class:`child.item_host.ItemHost` cancels it).
    Never raises but ``KeyboardInterrupt`` (the item is stopped first)."""
    started = time.time()
    outcome: dict[str, Any] = {"handle": handle, "index": index, "status": "failed", "result": None, "error": None,
                               "started_at": started, "completed_at": started, "node": socket.gethostname()}
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as tmp:
        spec = {**spec, "cwd": spec.get("cwd") or os.path.join(tmp, "work")}
        os.makedirs(os.path.join(tmp, "work"))
        with open(os.path.join(tmp, "spec.json"), "w", encoding="utf-8") as fh:
            json.dump(spec, fh)
        if relay is not None:
            with open(os.open(os.path.join(tmp, RELAY_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w",
                      encoding="utf-8") as fh:
                json.dump(relay, fh)
        base = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV and k not in FORWARDED_ENV}
        env = {**base, **provider_env}
        env.update(HERMES_JOB_ID=handle, HERMES_ITEM_DIR=tmp, HERMES_LIFELINE_PID=str(os.getpid()),
                   PYTHONUNBUFFERED="1")
        log_path = os.path.join(tmp, "log")
        limit = float(spec["timeout_seconds"]) + 5.0 if spec.get("timeout_seconds") else None
        try:
            proc = start_warm(cwd=spec["cwd"], env=env, log_path=log_path, provider=str(spec.get("provider") or ""),
                              base_env=base)
            if proc is None:  # cold: this worker's template warms up meanwhile
                with open(log_path, "ab", buffering=0) as log:
                    proc = subprocess.Popen([*PYTHON, "-m", "child"], cwd=spec["cwd"], env=env,
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, close_fds=True)
        except OSError as exc:
            outcome.update(error=f"could not start the item on {outcome['node']}: {exc}", completed_at=time.time())
            return outcome
        try:
            if on_start is not None:
                on_start(proc)
            proc.wait(limit)
        except subprocess.TimeoutExpired:
            _stop(proc, grace)
            outcome["status"] = "timed_out"
        except BaseException:  # ray.cancel: KeyboardInterrupt in the task
            _stop(proc, grace)
            raise
        finally:
            try:  # what the item's tools left in its group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        outcome.update(completed_at=time.time(), log=_tail(log_path, LOG_KEPT_BYTES))
        try:
            with open(os.path.join(tmp, "result.json"), encoding="utf-8") as fh:
                result = json.load(fh)
        except (OSError, ValueError):
            if outcome["status"] != "timed_out":
                tail = _tail(log_path).strip()
                outcome["error"] = (f"the item exited with status {proc.returncode} on {outcome['node']} before "
                                    "reporting a result" + (f"; last log lines:\n{tail}" if tail else ""))
            else:
                outcome["error"] = f"still running {limit:.0f} s after it started (timeout_seconds + 5)"
            return outcome
        reported = JobResult.from_wire(result)
        outcome.update(status=str(reported.status or "failed"), result=reported.to_wire(), error=reported.error)
        return outcome

