"""The op handlers, one module per message family (pueue-style), each marked with ``hermesd.router.op``.

Core families: ``admin`` (the daemon), ``jobs`` (any job), ``children`` (child
reports).  Job-type families hold their plugin too (``hermesd.plugin``):
``delegation``, ``sessions``, ``batch``; Kanban's is ``hermesd.kanban.ops``.
Every handler takes the typed ``hermesd.context.Context`` first.
"""
