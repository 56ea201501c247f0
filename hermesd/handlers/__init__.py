"""One dispatch table for every op, filled by one module per op family.

A handler is ``async def handler(daemon, args) -> result`` (client ops) or
``async def handler(daemon, job_id, args) -> result`` (child ops, after the
child's token was checked).  Its docstring is at once the ``hermesctl`` help
and the protocol reference (``docs/protocol.md`` is generated from it).

Job-type modules (sessions, batch, kanban) plug in through hooks:
``setup_hooks`` run once the state database is open (create the module's
service, e.g. ``daemon.services["batch"]``); ``restore_hooks`` run at start-up
after jobs are reconciled (resume work); ``shutdown_hooks`` run after children
are stopped.  Inside the runner: ``runner.spec_hooks[kind]``,
``runner.result_hooks`` and ``runner.exit_hooks``; in the job table:
``jobs.terminal_hooks``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

Handler = Callable[..., Awaitable[Any]]

HANDLERS: dict[str, Handler] = {}
CHILD_HANDLERS: dict[str, Handler] = {}
WORK_OPS: set[str] = set()
setup_hooks: list[Callable[[Any], None]] = []
restore_hooks: list[Callable[[Any], None]] = []
shutdown_hooks: list[Callable[[Any], None]] = []


def op(name: str, *, work: bool = False, child: bool = False) -> Callable[[Handler], Handler]:
    """Register a handler under ``name``; ``work`` ops are refused while shutting down."""

    def register(fn: Handler) -> Handler:
        (CHILD_HANDLERS if child else HANDLERS)[name] = fn
        if work:
            WORK_OPS.add(name)
        return fn

    return register


from hermesd.handlers import admin, batch, children, jobs, kanban, sessions  # noqa: E402,F401  (registration)
