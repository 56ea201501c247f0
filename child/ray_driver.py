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
   the items to start (``handle, index, spec``) and to cancel, or says stop, or that the
   driver is idle (``keep``: its batch ended and the daemon keeps it for the next one,
   :mod:`batch.ray_pool`; it keeps its hosts up meanwhile);
3. runs each item on a host (:mod:`child.item_host`: a Ray actor of several item
   slots on a worker node, which starts the item as a process of its own,
   :func:`child.item.run_item`), the hosts started as the items need them, where the
   cluster has room for ``ray.num_cpus`` CPUs and ``ray.memory_mb`` MiB per slot
   (:mod:`child.ray_hosts`); an item whose host was lost (its node or process died)
   is reported ``lost``, and the daemon sends its prompt again as a new item;
4. relays what its items send hermesd — their progress and their model calls'
   grants — from a socket on this node (:mod:`child.relay`), so they are governed,
   billed and watched as local children are;
5. on SIGINT/SIGTERM (the batch cancelled or ending, hermesd stopping) stops
   every item it started, waits up to ``ray.grace`` + 2 seconds for them, and ends.

If the driver dies (even ``kill -9``) Ray ends its job's actors, the hosts, and
their items die with them (their lifeline).  The driver reports every outcome as Ray returned it;
what counts is decided by the daemon (by handle and prompt index), so a retried
or repeated report never writes a second line.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any

from child.item import FORWARDED_ENV
from child.item_host import CONTROL
from child.ray_hosts import Host, HostPool
from child.relay import Relay
from batch.spec import DriverSpec
from hermesd.contract.wire import JobResult, JobSpec

CONNECT_SECONDS = 5.0
POLL_SECONDS = 0.2
CLUSTER_EVERY = 2.0
OUTCOMES_PER_SYNC = 32
SHAPES = 4


class DriverError(Exception):
    """The driver cannot work: Ray missing, the cluster unreachable."""


def reachable(address: str) -> None:
    """Raise :class:`DriverError` unless ``address`` (``host:port`` or ``ray://host:port``;
    ``auto`` and other forms are left to Ray) accepts a TCP connection within
    :data:`CONNECT_SECONDS`; an ``http(s)://`` address (a dashboard's, which Ray refuses with
    advice about ``RAY_ADDRESS`` whatever named it) is refused at once."""
    if address.lower().startswith(("http://", "https://")):
        raise DriverError(f"{address} is an HTTP address (a dashboard's?): give the cluster's address as "
                          "host:port (the GCS port `ray start --head` prints) or ray://host:port (Ray Client)")
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


def cluster(ray: Any, hosts: HostPool) -> dict[str, Any]:
    """``{address, nodes, cpus, cpus_free, fits, shapes}``: the live nodes and their CPUs; whether
    one of them could hold an item of ``hosts`` were it idle (``fits``); the nodes' sizes, each
    ``[CPUs, memory in MiB]``, the largest first (most CPUs, then memory; at most
    :data:`SHAPES` of them, each once)."""
    totals = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]
    shapes = sorted({(r.get("CPU", 0.0), int(r.get("memory", 0.0)) // 2**20) for r in totals}, reverse=True)
    return {"address": ray.get_runtime_context().gcs_address, "nodes": len(totals),
            "cpus": ray.cluster_resources().get("CPU", 0.0), "cpus_free": ray.available_resources().get("CPU", 0.0),
            "fits": hosts.fits(totals), "shapes": [list(shape) for shape in shapes[:SHAPES]]}


def node_address(ray: Any) -> str:
    """The address of this driver's node as the cluster knows it (where items on other nodes
    reach the relay): Ray's node IP of this process (a loopback cluster's is loopback)."""
    return ray.util.get_node_ip_address()


@dataclass(eq=False)
class Live:
    """An item on a host: ``item`` as the daemon sent it (``handle, index, spec``), and its ``host``."""

    item: dict[str, Any]
    host: Host


class Driver:
    """One connection to the cluster on behalf of one batch (see the module doc)."""

    def __init__(self, ray: Any, settings: dict[str, Any], channel: Any, stop: Any, relay: Relay | None = None):
        self.ray, self.channel, self.stop, self.relay = ray, channel, stop, relay
        self.grace = float(settings.get("grace") or 3.0)
        memory = int(settings["memory_mb"]) * 1024 * 1024 if settings.get("memory_mb") else 0
        self.hosts = HostPool(ray, float(settings.get("num_cpus", 1.0)), memory)
        self.env = ray.put({k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)})
        self.queue: list[dict[str, Any]] = []  # items waiting for a slot
        self.live: dict[Any, Live] = {}  # the run() reference of each item on a host
        self.stopping: dict[Any, Host] = {}  # cancelled items, until their slot is free
        self.outcomes: list[dict[str, Any]] = []
        self.reported = 0
        self.keep = False  # idle in the daemon's pool: the hosts are kept, warm, for the next batch
        self._cluster_at = 0.0

    def sync(self) -> bool:
        """One ``child.batch_sync``: report, then start and cancel what the reply says.
        Returns False when the daemon says stop."""
        info = None
        if time.monotonic() - self._cluster_at >= CLUSTER_EVERY:
            info, self._cluster_at = cluster(self.ray, self.hosts), time.monotonic()
            self.hosts.tidy(waiting=bool(self.queue), keep=self.keep)
        sent, self.outcomes = self.outcomes[:OUTCOMES_PER_SYNC], self.outcomes[OUTCOMES_PER_SYNC:]
        reply = self.channel.call("child.batch_sync", outcomes=sent, cluster=info, running=len(self.live))
        self.reported += len(sent)
        self.keep = bool(reply.get("keep"))
        self.queue += [{k: item[k] for k in ("handle", "index", "spec")} for item in reply.get("run") or []]
        if cancel := set(reply.get("cancel") or []):
            self.cancel(cancel)
        self.dispatch()
        return not reply.get("stop")

    def dispatch(self) -> None:
        """Grow the hosts to the items there are, and send each waiting item to a free slot."""
        self.hosts.grow(len(self.live) + len(self.queue))
        while self.queue and (host := self.hosts.take()) is not None:
            item = self.queue.pop(0)
            ref = host.actor.run.options(name=f"{item['handle']} prompt {item['index']}").remote(
                item["handle"], item["index"], item["spec"], self.env, self.grace,
                self.relay.admit(item["handle"]) if self.relay is not None else None)
            self.live[ref] = Live(item, host)

    def cancel(self, handles: set[str]) -> None:
        """Stop the items ``handles``: those waiting are dropped, those running stopped by their host."""
        self.queue = [item for item in self.queue if item["handle"] not in handles]
        for ref in [r for r, live in self.live.items() if live.item["handle"] in handles]:
            live = self.live.pop(ref)
            self._forget(live.item)
            live.host.actor.cancel.options(concurrency_group=CONTROL).remote(live.item["handle"], self.grace)
            self.stopping[ref] = live.host

    def collect(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for items to end or hosts to come up; queue the
        outcomes of the items that ended, and send waiting items to the slots freed."""
        refs = [*self.live, *self.stopping, *self.hosts.starting()]
        if not refs:
            self.stop.event.wait(timeout)
            return
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            if ref in self.stopping:
                self.hosts.release(self.stopping.pop(ref))
            elif ref in self.live:
                self._ended(ref, self.live.pop(ref))
            else:
                self.hosts.came_up(ref)
        if ready and self.queue:
            self.dispatch()

    def _ended(self, ref: Any, live: Live) -> None:
        self._forget(live.item)
        self.hosts.release(live.host)
        try:
            self.outcomes.append(self.ray.get(ref))
            return
        except self.ray.exceptions.RayActorError as exc:  # its host died: its node, or its process
            self.hosts.lost(live.host)
            error, status, what = exc, "lost", "its Ray host was lost"
        except Exception as exc:  # noqa: BLE001 - RayError subclasses: the call itself failed
            error, status, what = exc, "failed", "the Ray item failed"
        first = (str(error).strip().splitlines() or [""])[0]
        now = time.time()
        self.outcomes.append({"handle": live.item["handle"], "index": live.item["index"], "status": status,
                              "result": None, "started_at": now, "completed_at": now, "node": None,
                              "error": f"{what}: {error.__class__.__name__}: {first}"[:2000]})

    def _forget(self, item: dict[str, Any]) -> None:
        if self.relay is not None:
            self.relay.forget(item["handle"])

    def cancel_all(self) -> int:
        """Stop every item on a host; wait up to ``grace`` + 2 s for them to end.  Returns how many."""
        count = len(self.live)
        self.queue.clear()
        self.cancel({live.item["handle"] for live in self.live.values()})
        if self.stopping:
            self.ray.wait(list(self.stopping), num_returns=len(self.stopping), timeout=self.grace + 2.0)
        self.stopping.clear()
        return count

    def loop(self) -> None:
        """Sync and collect until told to stop (by the daemon or a signal)."""
        while not self.stop.is_set() and self.sync():
            if not self.outcomes:
                self.collect(POLL_SECONDS)


def run(spec: JobSpec, channel: Any, stop: Any) -> JobResult:
    """The driver of the batch in ``spec`` (a ``batch_driver`` job spec whose ``ray``
    map has ``address, num_cpus, memory_mb, grace``); returns its
    ``child.result``.  Raises :class:`DriverError` when it cannot start."""
    started = time.monotonic()
    settings = DriverSpec.from_wire(spec.part or {}).ray or {}
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
