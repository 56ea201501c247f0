"""The soak's mixed workload: what one cycle submits, and the record of every submission.

Per cycle (``Scale`` says how many of each): background delegations of several model turns with a
terminal command in each (the effect counter), jobs with a token budget that runs out, jobs whose
``write_file`` waits for an approval (the soak follows the approvals and answers them, as
``hermesctl approvals --follow`` does), a session taking turns and delegating in the background
(``/background``), a Kanban plan of tasks depending on each other, and a batch of prompts.  Each
submission carries an ``idempotency_key`` and is retried while the daemon is down, stopping or its
state database unavailable (a client that got no answer asks again with the same key and gets the
first request's job or Kanban task, as :mod:`hermesd.idempotency` promises).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.brain import tag
from client.calls import ClientError
from hermesd.protocol import ProtocolError

RETRIED = {"state_unavailable", "shutting_down", "daemon_not_running", "timeout", "not_hermesd"}
"""Error codes a request is asked again for (the daemon is restarting, stopping or its disk or database is busy)."""
SESSION = "soak"
PROFILE = "soaker"
IDEAL = {"d": 1, "e": 1, "g": 1, "a": 2, "k": 2, "s": 1, "b": 1}
"""Model calls a piece of work needs besides its ``TURNS`` (a command per turn, then the answer)."""


@dataclass
class Scale:
    """How much one cycle submits: ``delegations``, ``budgets``, ``approvals``, ``turns`` (session
    messages), ``errands`` (``/background``), ``tasks`` (a Kanban chain) and ``prompts`` (batch);
    ``steps``: the terminal commands of a delegation."""

    delegations: int = 6
    budgets: int = 2
    approvals: int = 2
    turns: int = 2
    errands: int = 2
    tasks: int = 3
    prompts: int = 100
    steps: int = 3

    @classmethod
    def small(cls) -> Scale:
        """The slow test's workload."""
        return cls(delegations=3, budgets=1, approvals=1, turns=1, errands=1, tasks=2, prompts=12, steps=2)


@dataclass
class Work:
    """One submission: ``ident`` (its tag id), ``kind`` (a tag kind), ``turns``, the job ``id`` (or
    the Kanban task's, or the batch's) once known, ``at`` (monotonic time of the submission),
    ``extra`` (what else the oracle needs: a batch's run directory and prompt count)."""

    ident: str
    kind: str
    turns: int
    id: str | None = None
    at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ideal(self) -> int:
        """Model calls this piece of work needs (a batch: one per prompt)."""
        return self.turns + IDEAL[self.kind] if self.kind != "b" else self.extra.get("prompts", 0)


def call(d: Any, op: str, deadline: float = 120.0, **args: Any) -> Any:
    """``op`` on a fresh connection, asked again while :data:`RETRIED` (up to ``deadline`` seconds);
    raises the last :class:`ProtocolError`/:class:`ClientError` otherwise."""
    end = time.monotonic() + deadline
    while True:
        try:
            return d.call(op, **args)
        except (ProtocolError, ClientError) as exc:
            if exc.code not in RETRIED or time.monotonic() > end:
                raise
            time.sleep(0.2)


class Workload:
    """What the soak submitted (``works``) to daemon ``d`` (a :class:`tests.harness.DaemonProc`)."""

    def __init__(self, d: Any, rng: random.Random, scale: Scale):
        self.d, self.rng, self.scale = d, rng, scale
        self.works: list[Work] = []
        self.lock = threading.Lock()

    def _add(self, kind: str, ident: str, turns: int) -> Work:
        work = Work(ident, kind, turns, at=time.monotonic())
        with self.lock:
            self.works.append(work)
        return work

    def setup(self) -> None:
        """What the workload needs once: the Kanban worker profile."""
        call(self.d, "profile.create", name=PROFILE, description="does soak tasks", toolsets=["file"])

    def delegate(self, kind: str, ident: str, turns: int, **args: Any) -> Work:
        """A background delegation of ``kind`` (``d``, ``g``, ``a``)."""
        work = self._add(kind, ident, turns)
        toolsets = ["file"] if kind == "a" else ["terminal"]
        work.id = call(self.d, "delegate", goal=f"soak work {tag(kind, ident, turns)}", background=True, queue=True,
                       toolsets=toolsets, cwd=str(self.d.work), idempotency_key=f"soak-{ident}", **args)["id"]
        return work

    def say(self, kind: str, ident: str, turns: int) -> Work:
        """A session message (``s``) or a ``/background`` errand of the session (``e``)."""
        work = self._add(kind, ident, turns)
        text = f"/background errand {tag(kind, ident, turns)}" if kind == "e" else f"hello {tag(kind, ident, turns)}"
        answer = call(self.d, "session.send", session=SESSION, text=text, cwd=str(self.d.work),
                      idempotency_key=f"soak-{ident}")
        work.id = answer["delegation_id"] if kind == "e" else answer["turn"]["id"]
        return work

    def plan(self, cycle: int) -> list[Work]:
        """A Kanban chain: each task waits for the one before."""
        works, parent = [], None
        for i in range(self.scale.tasks):
            work = self._add("k", f"c{cycle}k{i}", 0)
            record = call(self.d, "kanban.create", title=f"soak task {tag('k', work.ident, 0)}", assignee=PROFILE,
                          body=f"do {tag('k', work.ident, 0)}", parents=[parent] if parent else [],
                          cwd=str(self.d.work), idempotency_key=f"soak-{work.ident}")
            work.id = parent = record["id"]
            works.append(work)
        return works

    def batch(self, cycle: int) -> Work:
        """A batch run of ``scale.prompts`` prompts."""
        work = self._add("b", f"c{cycle}b", 0)
        dataset = self.d.base / f"prompts-{cycle}.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": f"prompt {i} {tag('b', f'c{cycle}b{i}', 0)}"}) + "\n"
                                   for i in range(self.scale.prompts)))
        out = self.d.base / "out"
        record = call(self.d, "batch.run", dataset_file=str(dataset), run_name=f"soak-{cycle}", batch_size=10,
                      num_workers=4, output_dir=str(out), idempotency_key=f"soak-{work.ident}")
        work.id = record["id"]
        work.extra = {"prompts": self.scale.prompts, "run_dir": str(out / f"soak-{cycle}")}
        return work

    def cycle(self, cycle: int) -> None:
        """Submit one cycle's work (in a random order)."""
        s = self.scale
        steps: list[Any] = [lambda: self.batch(cycle), lambda: self.plan(cycle)]
        steps += [lambda i=i: self.delegate("d", f"c{cycle}d{i}", s.steps) for i in range(s.delegations)]
        steps += [lambda i=i: self.delegate("g", f"c{cycle}g{i}", 8, max_tokens=60) for i in range(s.budgets)]
        steps += [lambda i=i: self.delegate("a", f"c{cycle}a{i}", 0) for i in range(s.approvals)]
        steps += [lambda i=i: self.say("s", f"c{cycle}s{i}", 0) for i in range(s.turns)]
        steps += [lambda i=i: self.say("e", f"c{cycle}e{i}", s.steps) for i in range(s.errands)]
        self.rng.shuffle(steps)
        for step in steps:
            step()


class Approver:
    """Follows the approvals (``approvals.list follow=true``, as ``hermesctl approvals --follow``) and
    approves each pending request, in a thread, until :meth:`stop`; survives the daemon's restarts."""

    def __init__(self, d: Any):
        self.d = d
        self.approved: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-approver", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                for request in self.d.call("approvals.list", follow=True)["approvals"]:
                    self.d.call("approvals.approve", id=request["id"], by="soak")
                    self.approved.add(request["id"])
            except (ProtocolError, ClientError, OSError):
                continue

    def stop(self) -> None:
        """End the thread."""
        self._stop.set()
        self._thread.join(10)


__all__ = ["Approver", "Scale", "Work", "Workload", "call"]
