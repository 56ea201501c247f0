"""The Kanban job type, one package with one owner of the board.

* :mod:`hermesd.kanban.board`: tasks, links, comments; the task status rules and
  every change (claims included) through the board's own transitions;
* :mod:`hermesd.kanban.actors`: who asks (person, orchestrator, worker) and what each may call;
* :mod:`hermesd.kanban.liveness`: the one record of the workers' signs of life;
* :mod:`hermesd.kanban.dispatcher`: ready tasks become ``kanban_worker`` children; silent workers lose their claim;
* :mod:`hermesd.kanban.profiles`: worker profiles;
* :mod:`hermesd.kanban.ops`: the plugin, the ``kanban.*``/``profile.*`` client ops and the agents' child ops.
"""

__all__ = ["PERSON", "STATUSES", "TRANSITIONS", "WORKER_ROLE", "Actor", "Board"]


def __getattr__(name: str) -> object:
    """``PERSON``, ``Actor`` (:mod:`hermesd.kanban.actors`), ``STATUSES``, ``TRANSITIONS``, ``WORKER_ROLE``,
    ``Board`` (:mod:`hermesd.kanban.board`); this module imports nothing itself (its ``config`` is a leaf)."""
    if name in ("PERSON", "Actor"):
        from hermesd.kanban import actors
        return getattr(actors, name)
    if name in __all__:
        from hermesd.kanban import board
        return getattr(board, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
