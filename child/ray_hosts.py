"""The Ray driver's item hosts: how many, where, and which one takes the next item.

A host (:class:`child.item_host.ItemHost`, a threaded Ray actor: the module doc there says
why) has ``slots`` item slots and reserves ``slots`` × ``num_cpus`` CPUs and ``slots`` ×
``memory`` bytes on its node for as long as it lives.  The pool keeps as many slots as the
driver has items (running and waiting): when it has fewer, it starts hosts on the nodes
with room (:func:`plan`: most free CPUs first, as many slots as fit there), each pinned to
its node (``NodeAffinitySchedulingStrategy``, not soft: its reservation is what fits
there).  A host not up within :data:`HOST_START_SECONDS` (its node's room taken meanwhile,
or its node lost) is ended and its slots planned again; a lost one (its node or process
died) is dropped; one with every slot empty for :data:`IDLE_SECONDS` while no item waits
is ended, so a batch holds no more of the cluster than it uses — but while the driver is idle
between batches (the daemon's pool, :mod:`batch.ray_pool`) its hosts are kept, warm.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from child.item_host import CONTROL, ItemHost

HOST_START_SECONDS = 60.0
IDLE_SECONDS = 30.0
NO_ROOM_EVERY = 60.0  # seconds between two warnings in the driver's log that no node has room
MAX_SLOTS = 32
"""Slots of one host at most (each a thread of its actor)."""


def room(res: dict[str, float], num_cpus: float, memory: int, most: int) -> int:
    """How many items (each reserving ``num_cpus`` CPUs and ``memory`` bytes; 0: none) the
    resources ``res`` hold, named as Ray names them (``CPU``, ``memory`` in bytes); ``most`` at most."""
    fit = most
    if num_cpus > 0:
        fit = min(fit, int(res.get("CPU", 0.0) / num_cpus + 1e-9))
    if memory > 0:
        fit = min(fit, int(res.get("memory", 0.0) / memory + 1e-9))
    return fit


def plan(free: dict[str, dict[str, float]], wanted: int, num_cpus: float, memory: int) -> list[tuple[str, int]]:
    """The hosts to start for ``wanted`` more slots: ``[(node_id, slots)]``, from ``free``
    (node id → its free resources as Ray names them: ``CPU``, ``memory`` in bytes), nodes with
    the most free CPUs first, each given as many slots as its CPUs and memory hold (at most
    :data:`MAX_SLOTS`).  ``num_cpus``, ``memory``: one item's reservation (0: none).  Fewer
    slots than ``wanted`` when the cluster has no room for more."""
    hosts = []
    for node, res in sorted(free.items(), key=lambda kv: (-kv[1].get("CPU", 0.0), kv[0])):
        fit = room(res, num_cpus, memory, min(wanted, MAX_SLOTS))
        if fit >= 1:
            hosts.append((node, fit))
            wanted -= fit
        if wanted <= 0:
            break
    return hosts


def free_resources(ray: Any) -> dict[str, dict[str, float]]:
    """Node id → free resources of every live node (Ray's ``available_resources_per_node``,
    a developer API; without it, each live node's total)."""
    try:
        from ray._private.state import available_resources_per_node

        return available_resources_per_node()
    except (ImportError, AttributeError):
        return {n["NodeID"]: dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")}


@dataclass(eq=False)
class Host:
    """One host actor: ``up`` is its ``ready()`` reference until it answered, then None;
    ``since`` (monotonic seconds) when it was started, then when its slots last emptied."""

    actor: Any
    node: str
    slots: int
    up: Any
    since: float
    busy: int = 0


class HostPool:
    """The hosts of one driver (see the module doc).  ``num_cpus`` and ``memory`` (bytes, 0:
    none) are one item's reservation."""

    def __init__(self, ray: Any, num_cpus: float, memory: int):
        self.ray, self.num_cpus, self.memory = ray, num_cpus, memory
        self.actor_class = ray.remote(concurrency_groups={CONTROL: 2})(ItemHost)
        self.hosts: list[Host] = []
        self._warned = -NO_ROOM_EVERY

    def fits(self, nodes: list[dict[str, float]]) -> bool:
        """Whether one of ``nodes`` (each node's total resources, as :func:`room` reads them) could
        hold an item at all, were nothing else running there."""
        return any(room(res, self.num_cpus, self.memory, 1) for res in nodes)

    def grow(self, wanted: int) -> None:
        """Start hosts until the pool has ``wanted`` slots (starting ones count), as far as
        the cluster has room."""
        short = wanted - sum(h.slots for h in self.hosts)
        if short <= 0:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        hosts = plan(free_resources(self.ray), short, self.num_cpus, self.memory)
        if not hosts and not self.hosts and time.monotonic() - self._warned > NO_ROOM_EVERY:
            self._warned = time.monotonic()
            print(f"hermes-ray-driver: no node of the cluster has room for an item ({self.num_cpus:g} CPUs, "
                  f"{self.memory // 2**20} MiB): the items wait (check --ray_num_cpus and --ray_memory_mb)",
                  file=sys.stderr, flush=True)
        for node, slots in hosts:
            options: dict[str, Any] = {"num_cpus": round(slots * self.num_cpus, 4), "max_concurrency": slots,
                                       "max_restarts": 0, "max_task_retries": 0,
                                       "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
            if self.memory:
                options["memory"] = slots * self.memory
            actor = self.actor_class.options(**options).remote(slots)
            self.hosts.append(Host(actor, node, slots, actor.ready.options(concurrency_group=CONTROL).remote(),
                                   time.monotonic()))

    def starting(self) -> list[Any]:
        """The ``ready()`` references of the hosts not up yet."""
        return [h.up for h in self.hosts if h.up is not None]

    def came_up(self, ref: Any) -> None:
        """The host of ``ready()`` reference ``ref`` answered: up, or (an error) lost."""
        host = next((h for h in self.hosts if h.up is ref), None)
        if host is None:
            return
        try:
            self.ray.get(ref)
        except Exception:  # noqa: BLE001 - RayActorError and kin: it never came up
            self.lost(host)
            return
        host.up, host.since = None, time.monotonic()

    def take(self) -> Host | None:
        """A host that is up with a free slot (the emptiest), its slot taken; None when none."""
        free = [h for h in self.hosts if h.up is None and h.busy < h.slots]
        if not free:
            return None
        host = max(free, key=lambda h: h.slots - h.busy)
        host.busy += 1
        return host

    def release(self, host: Host) -> None:
        """One of ``host``'s items ended: its slot is free."""
        host.busy = max(0, host.busy - 1)
        if not host.busy:
            host.since = time.monotonic()

    def lost(self, host: Host) -> None:
        """``host`` died (or is given up): drop it, and end it if it still lives."""
        if host in self.hosts:
            self.hosts.remove(host)
            try:
                self.ray.kill(host.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def tidy(self, waiting: bool, keep: bool = False) -> None:
        """End the hosts that did not come up in time, and (unless items are ``waiting``) those idle
        too long; ``keep``: the driver is idle in the daemon's pool, its idle hosts are kept (their
        idle time starts again when the next batch comes)."""
        now = time.monotonic()
        for host in list(self.hosts):
            late = host.up is not None and now - host.since > HOST_START_SECONDS
            idle = host.up is None and not host.busy and not waiting and now - host.since > IDLE_SECONDS
            if late:
                self.lost(host)
            elif idle and keep:
                host.since = now
            elif idle:
                self.lost(host)
