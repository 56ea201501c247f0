"""Job types as plugins: what one declares, and the set the core derives everything from.

A job type (delegation, session turns, batch, Kanban workers) is one
:class:`Plugin` subclass in one module, beside the ``@op`` handlers of its
family (:mod:`hermesd.router`).  It declares its job kinds (:class:`hermesd.jobs.JobKind`:
id prefix, whether it runs a process, what happens to its jobs at shutdown and
at restart) and implements the hooks it needs.  ``hermesd.server.PLUGINS`` lists
the plugins; :class:`Plugins` gives the core (job table, runner, daemon) the
kinds, prefixes, shutdown and restart rules, and calls each hook for the jobs
of its own kinds only — the core names no kind, and no plugin filters on
``row["kind"]``.

Adding a job type is one module (kinds, ops, hooks) and one line in
``hermesd.server.PLUGINS``.
A plugin may also declare no kind and use only the hooks that see every job
(``admit``, ``after_exit``, ``restore``…): :class:`hermesd.containers.plugin.ContainersPlugin`
gives any job's container its life that way, without a line per job kind.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Iterable

from hermesd.jobs import JobKind

if TYPE_CHECKING:
    from hermesd.context import Context
    from hermesd.contract import JobSpec

Row = dict[str, Any]


class Plugin:
    """A job type.  Subclasses set :attr:`kinds` and override the hooks they need.

    The daemon creates one instance once the state database is open
    (``__init__(ctx)``: create services, ``ctx.provide`` them for the handlers).
    Hooks of the first group are called only for jobs of the plugin's kinds;
    the others for everything.  Its ops are the ``@op`` functions of its module
    (:meth:`op_modules`).
    """

    kinds: ClassVar[tuple[JobKind, ...]] = ()

    def __init__(self, ctx: "Context"):
        self.ctx = ctx

    @classmethod
    def op_modules(cls) -> tuple[ModuleType, ...]:
        """The modules whose ``@op`` handlers are this plugin's ops: its own module."""
        return (sys.modules[cls.__module__],)

    # jobs of this plugin's kinds ------------------------------------------------

    def spec(self, row: Row, spec: "JobSpec") -> None:
        """Add to the spec a child of this kind receives (``child.hello``)."""

    def on_result(self, row: Row, result: dict[str, Any]) -> None:
        """A child reported its result, before the terminal transition."""

    def on_terminal(self, row: Row) -> list[dict[str, Any]]:
        """Inside the terminal transition's transaction; returns extra events to publish after commit."""
        return []

    def on_exit(self, row: Row) -> None:
        """The job is terminal and its process reaped (slots released)."""

    def stop(self, row: Row, reason: str) -> None:
        """Stop a live job of a kind without a process (``cancel``); it ends through its own transition."""

    # everything -----------------------------------------------------------------

    def admit(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        """Any job is about to be admitted (``Runner.submit``): may change its row's ``fields``
        (e.g. its ``spec``) or refuse it by raising ``ProtocolError``."""

    def after_exit(self, row: Row | None) -> None:
        """Any job is terminal and reaped (e.g. its foreground children end too)."""

    def on_event(self, event: dict[str, Any]) -> None:
        """Any event, after it is published (in process)."""

    def restore(self) -> None:
        """Start-up, after the jobs are reconciled: resume work."""

    def shutdown(self) -> None:
        """Shutdown, after the children are stopped and before the sockets close."""


class Plugins:
    """The plugins of one daemon: the kinds they declare and their hooks, by kind.

    Raises ``ValueError`` at construction when two plugins declare the same kind
    or id prefix.
    """

    def __init__(self, classes: Iterable[type[Plugin]]):
        self.classes = tuple(classes)
        self.kinds: dict[str, JobKind] = {}
        for cls in self.classes:
            for kind in cls.kinds:
                if kind.name in self.kinds or kind.prefix in {k.prefix for k in self.kinds.values()}:
                    raise ValueError(f"plugin {cls.__name__}: job kind {kind.name!r} or prefix {kind.prefix!r} "
                                     "is declared twice")
                self.kinds[kind.name] = kind
        self.instances: list[Plugin] = []
        self._owner: dict[str, Plugin] = {}

    def op_modules(self) -> list[ModuleType]:
        """Every plugin's op modules, in plugin order."""
        return [m for cls in self.classes for m in cls.op_modules()]

    def start(self, ctx: "Context") -> None:
        """Create the plugin instances (once the state database is open)."""
        self.instances = [cls(ctx) for cls in self.classes]
        self._owner = {kind.name: p for p in self.instances for kind in type(p).kinds}

    def kind(self, name: str) -> JobKind:
        """The :class:`JobKind` called ``name``; raises ``KeyError``."""
        return self.kinds[name]

    def names(self, **where: Any) -> tuple[str, ...]:
        """Kind names whose :class:`JobKind` fields equal ``where`` (all without)."""
        return tuple(k.name for k in self.kinds.values() if all(getattr(k, f) == v for f, v in where.items()))

    def _of(self, row: Row | None) -> Plugin | None:
        return self._owner.get(row["kind"]) if row else None

    # the hooks the core calls --------------------------------------------------

    def spec(self, row: Row, spec: "JobSpec") -> None:
        """:meth:`Plugin.spec` of the job's plugin."""
        plugin = self._of(row)
        if plugin is not None:
            plugin.spec(row, spec)

    def admit(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        """:meth:`Plugin.admit` of every plugin, in order (the first refusal stops it)."""
        for p in self.instances:
            p.admit(job_id, kind, fields)

    def on_result(self, row: Row, result: dict[str, Any]) -> None:
        """:meth:`Plugin.on_result` of the job's plugin."""
        plugin = self._of(row)
        if plugin is not None:
            plugin.on_result(row, result)

    def on_terminal(self, row: Row) -> list[dict[str, Any]]:
        """:meth:`Plugin.on_terminal` of the job's plugin (a ``JobTable`` terminal hook)."""
        plugin = self._of(row)
        return plugin.on_terminal(row) if plugin is not None else []

    def on_exit(self, row: Row | None) -> None:
        """:meth:`Plugin.on_exit` of the job's plugin, then :meth:`Plugin.after_exit` of every plugin."""
        plugin = self._of(row)
        if plugin is not None:
            plugin.on_exit(row)
        for p in self.instances:
            p.after_exit(row)

    def stop(self, row: Row, reason: str) -> None:
        """:meth:`Plugin.stop` of the job's plugin."""
        plugin = self._of(row)
        if plugin is not None:
            plugin.stop(row, reason)

    def on_event(self, event: dict[str, Any]) -> None:
        """:meth:`Plugin.on_event` of every plugin (an ``EventLog`` listener)."""
        for p in self.instances:
            p.on_event(event)

    def restore(self) -> None:
        """:meth:`Plugin.restore` of every plugin, in order."""
        for p in self.instances:
            p.restore()

    def shutdown(self) -> None:
        """:meth:`Plugin.shutdown` of every plugin, in order."""
        for p in self.instances:
            p.shutdown()
