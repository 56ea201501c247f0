"""The Ray driver of a batch: a supervised child of hermesd that runs its items on a Ray cluster.

hermesd never imports Ray.  For a batch run with ``--executor ray`` it starts
this driver as a ``batch_driver`` child (``python -m child``: own session, log
file ``jobs/ID/log``, lifeline, token on ``children.sock``) and starts it again
when it dies (``batch.executor_ray``).  The driver

1. connects to the cluster: ``ray.init(address)`` (the spec's ``ray.address``,
   else ``RAY_ADDRESS``, else ``auto``); a ``host:port`` that accepts no TCP
   connection within :data:`CONNECT_SECONDS` is refused at once (Ray itself
   would retry for minutes);
2. loops on ``child.batch_sync``: it tells the daemon which items ended (their
   outcomes, at most :data:`OUTCOMES_PER_SYNC` a message) and, every
   :data:`CLUSTER_EVERY` seconds, what the cluster looks like; the reply names
   the items to start (``handle, index, spec``) and to cancel, or says stop;
3. runs each item as a Ray task (:func:`child.item.run_item`: the agent in a
   process of its own on a worker node) reserving ``ray.num_cpus`` CPUs and
   ``ray.memory_mb`` MiB; Ray runs a task whose node or worker was lost again
   (up to ``ray.max_retries`` times).  An item sent as another one ended goes to
   the node that item freed (:meth:`Driver.placement`);
4. relays what its items send hermesd — their progress and their model calls'
   grants — from a socket on this node (:mod:`child.relay`), so they are governed,
   billed and watched as local children are;
5. on SIGINT/SIGTERM (the batch cancelled or ending, hermesd stopping) cancels
   every task it started, waits up to ``ray.grace`` + 2 seconds for them, and ends.

If the driver dies (even ``kill -9``) Ray ends its job's tasks: the owner of
their results is gone.  The driver reports every outcome as Ray returned it;
what counts is decided by the daemon (by handle and prompt index), so a retried
or repeated report never writes a second line.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from typing import Any

from child.item import FORWARDED_ENV, run_item
from child.relay import Relay
from hermesd.contract import JobResult, JobSpec

CONNECT_SECONDS = 5.0
POLL_SECONDS = 0.2
CLUSTER_EVERY = 2.0
OUTCOMES_PER_SYNC = 32


class DriverError(Exception):
    """The driver cannot work: Ray missing, the cluster unreachable."""


def reachable(address: str) -> None:
    """Raise :class:`DriverError` unless ``address`` (``host:port`` or ``ray://host:port``;
    ``auto`` and other forms are left to Ray) accepts a TCP connection within
    :data:`CONNECT_SECONDS`."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise DriverError(f"cannot reach the Ray cluster at {address}: {exc} (is it running? check --ray_address, "
                          "batch.ray_address or RAY_ADDRESS)") from None


def keep_loopback() -> None:
    """Make Ray (in this process) keep a loopback host as given.

    Ray replaces ``127.0.0.1``/``localhost``/``::1`` in a cluster address (``ray.init(address)``,
    ``ray start --address``) and in ``--node-ip-address`` by the machine's primary interface
    address (``ray._private.services.resolve_ip_for_localhost``; Ray 2.60, ray-project/ray#59110),
    so a cluster meant to live on loopback talks over the machine's network interface.  After this
    call a loopback host stays what it is; other hosts are untouched.  Needs Ray importable; a Ray
    without that function is left alone."""
    from ray._private import services

    resolve = getattr(services, "resolve_ip_for_localhost", None)
    if resolve is None or getattr(resolve, "keeps_loopback", False):
        return

    def keep(host: str) -> str:
        if not host:
            raise ValueError(f"Malformed host: {host}")
        return host

    keep.keeps_loopback = True  # type: ignore[attr-defined]
    services.resolve_ip_for_localhost = keep


def connect(address: str) -> Any:
    """Import Ray and join the cluster at ``address`` (a loopback host kept as given,
    :func:`keep_loopback`); returns the ``ray`` module.  Raises :class:`DriverError`."""
    try:
        import ray
    except ImportError as exc:
        raise DriverError(f"Ray is not installed for hermesd's Python ({exc}): pip install 'hermesd[ray]'") from None
    keep_loopback()
    reachable(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, namespace="hermesd",
                 configure_logging=True)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError…: all mean "no cluster here"
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise DriverError(f"cannot join the Ray cluster at {address}: {first}") from None
    return ray


def cluster(ray: Any) -> dict[str, Any]:
    """``{address, nodes, cpus, cpus_free}``: the live nodes and their CPUs."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"address": ray.get_runtime_context().gcs_address, "nodes": len(nodes),
            "cpus": ray.cluster_resources().get("CPU", 0.0), "cpus_free": ray.available_resources().get("CPU", 0.0)}


def node_address(ray: Any) -> str:
    """The address of this driver's node as the cluster knows it (where items on other nodes
    reach the relay): Ray's node IP of this process (a loopback cluster's is loopback)."""
    return ray.util.get_node_ip_address()


def run_item_here(*args: Any) -> dict[str, Any]:
    """:func:`child.item.run_item` as this driver's Ray task: its outcome also names the Ray
    node it ran on (``node_id``, hex), which :meth:`Driver.collect` takes out again."""
    import ray

    return {**run_item(*args), "node_id": ray.get_runtime_context().get_node_id()}


class Driver:
    """One connection to the cluster on behalf of one batch (see the module doc)."""

    def __init__(self, ray: Any, settings: dict[str, Any], channel: Any, stop: Any, relay: Relay | None = None):
        self.ray, self.channel, self.stop, self.relay = ray, channel, stop, relay
        self.grace = float(settings.get("grace") or 3.0)
        options: dict[str, Any] = {"num_cpus": float(settings.get("num_cpus", 1.0)),
                                   "max_retries": int(settings.get("max_retries", 3)), "retry_exceptions": False}
        if settings.get("memory_mb"):
            options["memory"] = int(settings["memory_mb"]) * 1024 * 1024
        self.task = ray.remote(**options)(run_item_here)
        self.env = ray.put({k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)})
        self.live: dict[Any, dict[str, Any]] = {}  # ObjectRef -> {handle, index}
        self.outcomes: list[dict[str, Any]] = []
        self.freed: list[str] = []  # the Ray node of each item that ended, until an item is sent there
        self.reported = 0
        self._cluster_at = 0.0

    def sync(self) -> bool:
        """One ``child.batch_sync``: report, then start and cancel what the reply says.
        Returns False when the daemon says stop."""
        info = None
        if time.monotonic() - self._cluster_at >= CLUSTER_EVERY:
            info, self._cluster_at = cluster(self.ray), time.monotonic()
        sent, self.outcomes = self.outcomes[:OUTCOMES_PER_SYNC], self.outcomes[OUTCOMES_PER_SYNC:]
        reply = self.channel.call("child.batch_sync", outcomes=sent, cluster=info, running=len(self.live))
        self.reported += len(sent)
        for item in reply.get("run") or []:
            ref = self.task.options(name=f"{item['handle']} prompt {item['index']}", **self.placement()).remote(
                item["handle"], item["index"], item["spec"], self.env, self.grace,
                self.relay.admit(item["handle"]) if self.relay is not None else None)
            self.live[ref] = {"handle": item["handle"], "index": item["index"]}
        cancel = set(reply.get("cancel") or [])
        for ref in [r for r, item in self.live.items() if item["handle"] in cancel]:
            self.ray.cancel(ref)
            self._forget(self.live.pop(ref))
        return not reply.get("stop")

    def placement(self) -> dict[str, Any]:
        """The task options that send the next item to a node an item just freed, if any: Ray's
        ``NodeAffinitySchedulingStrategy`` with ``soft`` (a lost node: anywhere) and
        ``_spill_on_unavailable`` (the room taken meanwhile: anywhere).  Without it the task's
        lease goes through the driver's own raylet, which picks a node by the cluster's resources
        as last reported to it: on the bench's cluster a freed CPU was seen there 34 ms later on
        average (3 ms with this; ``bench/README.md``, "Batch overhead on a Ray cluster")."""
        if not self.freed:
            return {}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self.freed.pop(0)
        try:
            return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)}
        except TypeError:  # a Ray without the private flag: where the cluster's resources say
            return {}

    def collect(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for tasks to end; queue the outcomes of all that did."""
        if not self.live:
            self.stop.event.wait(timeout)
            return
        ready, _ = self.ray.wait(list(self.live), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(list(self.live), num_returns=len(self.live), timeout=0)
        for ref in ready:
            item = self.live.pop(ref)
            self._forget(item)
            outcome = self.outcome(ref, item)
            if node := outcome.pop("node_id", None):
                self.freed.append(str(node))
            self.outcomes.append(outcome)

    def _forget(self, item: dict[str, Any]) -> None:
        if self.relay is not None:
            self.relay.forget(item["handle"])

    def outcome(self, ref: Any, item: dict[str, Any]) -> dict[str, Any]:
        """The task's outcome, or a failure naming what Ray reported (retries spent)."""
        try:
            return self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - RayError subclasses: worker, node or task lost
            first = (str(exc).strip().splitlines() or [""])[0]
            now = time.time()
            return {**item, "status": "failed", "result": None, "started_at": now, "completed_at": now, "node": None,
                    "error": f"the Ray task failed: {exc.__class__.__name__}: {first}"[:2000]}

    def cancel_all(self) -> int:
        """Cancel every live task; wait up to ``grace`` + 2 s for them to end.  Returns how many."""
        refs = list(self.live)
        for ref in refs:
            self.ray.cancel(ref)
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=self.grace + 2.0)
        self.live.clear()
        return len(refs)

    def loop(self) -> None:
        """Sync and collect until told to stop (by the daemon or a signal)."""
        while not self.stop.is_set() and self.sync():
            if not self.outcomes:
                self.collect(POLL_SECONDS)


def run(spec: JobSpec, channel: Any, stop: Any) -> JobResult:
    """The driver of the batch in ``spec`` (a ``batch_driver`` job spec whose ``ray``
    map has ``address, num_cpus, memory_mb, max_retries, grace``); returns its
    ``child.result``.  Raises :class:`DriverError` when it cannot start."""
    started = time.monotonic()
    settings = spec.ray or {}
    address = settings.get("address") or os.environ.get("RAY_ADDRESS") or "auto"
    ray = connect(address)
    for sig in (signal.SIGINT, signal.SIGTERM):  # ray.init may have installed its own
        signal.signal(sig, lambda signum, _frame: stop.set(signal.Signals(signum).name))
    relay = Relay(os.environ["HERMES_CHILD_SOCKET"], channel.job, channel.token, node_address(ray))
    driver = Driver(ray, settings, channel, stop, relay)
    try:
        driver.loop()
    finally:
        cancelled = driver.cancel_all()
        relay.close()
    ended = "interrupted" if stop.is_set() else "completed"
    return JobResult(status=ended, exit_reason=ended, duration_seconds=time.monotonic() - started,
                     summary=f"Ray driver for {address}: {driver.reported} item(s) reported, {cancelled} cancelled "
                     "at the end")
