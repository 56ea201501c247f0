"""The core's op handlers, one module per message family (pueue-style), each marked with ``hermesd.router.op``.

Core families: ``admin`` (the daemon), ``jobs`` (any job), ``children`` (child
reports).  A job type's ops live in its own package beside its plugin
(``hermesd.delegation.ops``, ``hermesd.sessions.ops``, ``hermesd.kanban.ops``,
``batch.ops``; ``hermesd.control.ops`` and ``hermesd.upkeep.ops`` without a kind).
Every handler takes the typed ``hermesd.context.Context`` first.
"""
