"""Warm start (``supervisor.start_method: forkserver``, the default): children forked from a warm template.

A cold child (``python -m child``) pays for a new interpreter and for its
imports (zmq, msgpack, the agent runtime, ``import anthropic`` ~1.4 s) every
time.  With warm start hermesd starts one template process, the *zygote*
(``python -m child.zygote``, on the child side: it is the child runtime,
imported once), which forks children ahead of time (*spares*) and sends them
to the daemon; starting a job is then one write to a spare's pipe.

The package, daemon side:

* :mod:`hermesd.warm.wire` — the wire between daemon, zygote and spares and the
  names both sides share (a leaf: children import it, as they import
  :mod:`hermesd.protocol`);
* :mod:`hermesd.warm.client` — :class:`~hermesd.warm.client.ZygoteClient`, the
  daemon's handle on the zygote and the spares it holds; it never blocks the
  event loop (the zygote's socket is read when the loop says it is readable);
* :mod:`hermesd.warm.spawner` — :class:`~hermesd.warm.spawner.WarmSpawner`, the
  process manager's strategy for ``forkserver``: a spare when one is held,
  else a cold start at once while the spares catch up.

The zygote and the spare (what runs in the forked processes) are
:mod:`child.zygote` and :mod:`child.spare`, whose docs tell who is whose parent
and what a forked child makes anew.  This module imports nothing: importing
:mod:`hermesd.warm.wire` from a child must not pull in the daemon.
"""
