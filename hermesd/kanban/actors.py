"""Who asks the board: people, orchestrator agents and workers, and what each may call.

A person (``kanban.*`` client ops) and an orchestrator agent (a job whose
toolsets include ``kanban``) create, link, list, show, comment and unblock
(people also archive); a worker (a ``kanban_worker`` job) reads its own task,
comments on it, completes, blocks or heartbeats it.  The board
(:mod:`hermesd.kanban.board`) checks the rest: a worker touches only its own
task, and completes or blocks it only while its claim is its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hermesd.protocol import ProtocolError

ORCHESTRATOR_VERBS = ("create", "link", "list", "show", "comment", "unblock")
"""What an orchestrator agent may call (``kanban.<verb>`` child ops)."""
WORKER_VERBS = ("my_task", "complete", "block", "comment", "heartbeat")
"""What a worker may call, on its own task only."""


@dataclass(frozen=True)
class Actor:
    """Who asks: ``name`` (written as comment author and ``created_by``), the
    calling ``job`` (None for a person), and for a worker its own ``task``."""

    name: str
    job: str | None = None
    task: str | None = None

    @property
    def worker(self) -> bool:
        """True for a Kanban worker (it may touch only :attr:`task`)."""
        return self.task is not None

    @property
    def verbs(self) -> tuple[str, ...]:
        """The ``kanban.<verb>`` child ops this agent may call."""
        return WORKER_VERBS if self.worker else ORCHESTRATOR_VERBS

    def may(self, verb: str) -> None:
        """Raise ``bad_request`` naming what it may call unless this agent may call ``verb``."""
        if verb not in self.verbs:
            who = "a Kanban worker" if self.worker else "an orchestrator"
            raise ProtocolError("bad_request", f"kanban.{verb} is not available to {who}; it may call: "
                                f"{', '.join('kanban.' + v for v in self.verbs)}", {"field": "op"})


PERSON = Actor("user")


def person(author: str | None) -> Actor:
    """A person, named ``author`` (default ``user``)."""
    return Actor(author or PERSON.name)


def of_job(row: dict[str, Any], is_worker: bool, assignee: Callable[[str], str | None]) -> Actor:
    """The actor job ``row`` is: a worker (``is_worker``: its kind is the Kanban
    worker's) of the task ``row["parent"]``, named after that task's ``assignee``;
    else an orchestrator, which needs ``kanban`` in its toolsets (``bad_request``)."""
    job = row["id"]
    if is_worker:
        return Actor(f"{assignee(row['parent'] or '') or 'worker'} ({job})", job=job, task=row["parent"])
    if "kanban" not in (row.get("toolsets") or []):
        raise ProtocolError("bad_request", f"job {job} does not have the kanban toolset (it is enabled only by its "
                            "literal name 'kanban')", {"field": "op"})
    return Actor(f"session {row['session']}" if row.get("session") else f"job {job}", job=job)
