"""A host of batch items on a Ray worker node: one Ray actor runs several items at once.

Ray gives a job a worker process of its own for each task it runs at once, and each
one starts Python, imports Ray and then the item's warm template (:mod:`child.item_warm`):
on the bench's cluster 8 trivial tasks started 2.1–5.5 s after they were sent, 8 calls on
two actors 1.3–1.4 s (``bench/README.md``, "Batch overhead on a Ray cluster").  So the driver
(:mod:`child.ray_driver`, :mod:`child.ray_hosts`) runs its items on hosts: a threaded actor
of ``slots`` item slots, pinned to a node, reserving ``slots`` × the item's CPUs and memory
for as long as it lives.  Each :meth:`ItemHost.run` is one item, in a thread of its own,
exactly as a Ray task ran it (:func:`child.item.run_item`): its own process (a spare of
this host's template, so a child of this Ray worker) in its own session and process group,
its lifeline serving this process; :meth:`ItemHost.cancel` stops one (SIGINT, then SIGKILL
to its group after ``grace`` seconds), on a thread of the ``control`` concurrency group, so
it never waits behind running items.  The host dies with its driver (Ray ends a job's
actors with it) and its node; its items die with it (their lifeline).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from child import item_warm
from child.item import run_item, sweep_scratch

SWEEP_SECONDS = 60.0
"""A host looks for scratch directories that dead hosts left (:func:`child.item.sweep_scratch`)
at its first item and then at most this often, in seconds."""
CONTROL = "control"
"""The concurrency group of :meth:`ItemHost.ready` and :meth:`ItemHost.cancel` (2 threads)."""


class ItemHost:
    """The body of a host actor (the driver wraps it with ``ray.remote``): up to ``slots``
    items at once, each in a thread (see the module doc)."""

    def __init__(self, slots: int):
        item_warm.keep_spares(slots)
        self.slots = slots
        self._swept = -SWEEP_SECONDS
        self._lock = threading.Lock()
        self._procs: dict[str, Any] = {}  # handle -> the item's process while it runs
        self._cancelled: set[str] = set()

    def ready(self) -> dict[str, Any]:
        """``{node_id, pid}``: this host's Ray node (hex) and process, once it is up."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def run(self, handle: str, index: int, spec: dict[str, Any], provider_env: dict[str, str], grace: float,
            relay: dict[str, str] | None) -> dict[str, Any]:
        """One item: :func:`child.item.run_item`'s outcome (never raises)."""

        def on_start(proc: Any) -> None:
            with self._lock:
                self._procs[handle] = proc
                stop = handle in self._cancelled
            if stop:
                self._stop(proc, grace)

        with self._lock:
            now = time.monotonic()
            sweep = now - self._swept >= SWEEP_SECONDS
            if sweep:
                self._swept = now
        if sweep:  # what hosts killed on this node left (outside the lock: cancel() needs it)
            sweep_scratch()
        with self._lock:
            if handle in self._cancelled:  # cancelled before it got here: never started
                self._cancelled.discard(handle)
                return {"handle": handle, "index": index, "status": "interrupted", "result": None,
                        "error": "cancelled before it started", "node": None}
        try:
            return run_item(handle, index, spec, provider_env, grace, relay, on_start=on_start)
        finally:
            with self._lock:
                self._procs.pop(handle, None)
                self._cancelled.discard(handle)

    def cancel(self, handle: str, grace: float) -> bool:
        """Stop item ``handle`` (now if it runs, as soon as it starts if it is starting);
        returns whether it was running."""
        with self._lock:
            proc = self._procs.get(handle)
            if proc is None:
                self._cancelled.add(handle)
        if proc is not None:
            self._stop(proc, grace)
        return proc is not None

    @staticmethod
    def _stop(proc: Any, grace: float) -> None:
        """SIGINT to the item now, SIGKILL to its process group ``grace`` seconds later
        (its :meth:`run` thread reaps it and reports what it left)."""
        proc.send_signal(signal.SIGINT)

        def kill() -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        timer = threading.Timer(grace, kill)
        timer.daemon = True
        timer.start()
