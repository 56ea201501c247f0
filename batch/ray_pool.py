"""Ray drivers kept warm between batches: the pool of idle ones, and when the daemon ends them.

A batch's driver (:mod:`child.ray_driver`, a ``batch_driver`` child of hermesd) keeps its item
hosts (Ray actors, each with its warm template: :mod:`child.item_host`) up while it lives.  When
its batch ends (``completed``, or ``failed`` while its driver still runs), the driver is not
stopped: it goes idle into the :class:`Pool`, its hosts still up, and the next batch on the
same cluster with the same reservation (its :func:`key`) takes it, so that batch's first items
start at once in slots already warm (no ``ray.init``, no Ray worker process, no template to
import).  The daemon (:class:`batch.executor_ray.RayExecutor`) ends an idle driver — it is told
``stop`` at its next sync, and its hosts end with it —

* ``ray.idle_seconds`` after its batch ended (0: no pool; each batch's driver ends with it);
* at once when a batch needs a new driver on the same cluster (an idle one holds room there);
* and never keeps the driver of a batch cancelled (``hermesctl batch cancel`` frees the cluster)
  or of a refused run that found no room.

Who owns the pool, and ``kill -9``.  The pool lives in the daemon's memory, each driver a
supervised child of hermesd, its hosts ordinary (not detached) actors of the driver's Ray job.
``kill -9`` of hermesd: each driver dies by its lifeline, Ray ends a dead driver's actors, and
their items die with their host (their lifeline); nothing is left holding the cluster, and the
restarted hermesd starts with an empty pool.  ``kill -9`` of an idle driver: the same on the
cluster, and its exit takes it out of the pool.  Detached named actors that a later driver
would find were the other way: they outlive a killed hermesd and hold their nodes' CPUs until
something comes back for them.
"""

from __future__ import annotations

from typing import Any, Callable

from batch.settings import Settings


def key(settings: Settings, grace: float) -> tuple[Any, ...]:
    """What a driver is made for (the ``ray`` map of its job spec): the cluster (the address as
    given; None: ``RAY_ADDRESS`` or ``auto``), one item's CPUs and MiB, and the stop grace."""
    return settings.ray_address, settings.ray_num_cpus, settings.ray_memory_mb, grace


class Pool:
    """The idle drivers (objects with ``key``, ``timer``; see :class:`batch.executor_ray.RayExecutor`),
    oldest first, each with the timer that ends it; ``loop``: the daemon's event loop."""

    def __init__(self, loop: Any):
        self.loop = loop
        self.idle: list[Any] = []

    def put(self, drv: Any, seconds: float, end: Callable[[Any], None]) -> None:
        """Keep ``drv`` idle; ``end(drv)`` is called ``seconds`` from now unless it is taken first."""
        self.idle.append(drv)
        drv.timer = self.loop.call_later(seconds, end, drv)

    def take(self, wanted: tuple[Any, ...]) -> Any | None:
        """The idle driver made for ``wanted`` (:func:`key`) that waited longest, out of the pool; None when none."""
        drv = next((d for d in self.idle if d.key == wanted), None)
        if drv is not None:
            self.drop(drv)
        return drv

    def drop(self, drv: Any) -> bool:
        """Take ``drv`` out of the pool (its timer cancelled); False when it was not in it."""
        if drv not in self.idle:
            return False
        self.idle.remove(drv)
        if drv.timer is not None:
            drv.timer.cancel()
            drv.timer = None
        return True

    def on(self, address: Any) -> list[Any]:
        """The idle drivers of the cluster at ``address`` (as :func:`key` names it)."""
        return [d for d in self.idle if d.key[0] == address]
