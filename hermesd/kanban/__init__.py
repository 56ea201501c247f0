"""The Kanban job type, one package with one owner of the board.

* :mod:`hermesd.kanban.board`: tasks, links, comments; the task status rules and
  every change (claims included) through the board's own transitions;
* :mod:`hermesd.kanban.actors`: who asks (person, orchestrator, worker) and what each may call;
* :mod:`hermesd.kanban.liveness`: the one record of the workers' signs of life;
* :mod:`hermesd.kanban.dispatcher`: ready tasks become ``kanban_worker`` children; silent workers lose their claim;
* :mod:`hermesd.kanban.profiles`: worker profiles;
* :mod:`hermesd.kanban.ops`: the plugin, the ``kanban.*``/``profile.*`` client ops and the agents' child ops.
"""

from hermesd.kanban.actors import PERSON, Actor
from hermesd.kanban.board import STATUSES, TRANSITIONS, WORKER_ROLE, Board

__all__ = ["PERSON", "STATUSES", "TRANSITIONS", "WORKER_ROLE", "Actor", "Board"]
