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
(``admit``, ``after_exit``, ``restore``…): :class:`hermesd.containers.ops.ContainersPlugin`
gives any job's container its life that way, without a line per job kind.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Iterable

from hermesd.events import CORE_EVENTS
from hermesd.jobs import JobKind
from hermesd.store import CORE_MIGRATIONS, schema

if TYPE_CHECKING:
    from hermesd.config import Config
    from hermesd.context import Context
    from hermesd.contract.wire import JobResult, JobSpec

Row = dict[str, Any]


def own(hook: Any) -> Any:
    """Mark a :class:`Plugin` method as a hook called for the jobs of the plugin's own kinds
    only (its first argument is the job's row)."""
    hook.scope = "own"
    return hook


def every(hook: Any) -> Any:
    """Mark a :class:`Plugin` method as a hook called on every plugin, in order."""
    hook.scope = "every"
    return hook


class Plugin:
    """A job type.  Subclasses set :attr:`kinds` and override the hooks they need.

    The daemon creates one instance once the state database is open
    (``__init__(ctx)``: create services, ``ctx.provide`` them for the handlers).
    Hooks marked :func:`own` are called only for jobs of the plugin's kinds;
    those marked :func:`every` for everything.  The hooks are declared here only:
    :class:`Plugins` derives its calls from them (:data:`HOOKS`).  Its ops are the
    ``@op`` functions of its module (:meth:`op_modules`).
    """

    kinds: ClassVar[tuple[JobKind, ...]] = ()
    migrations: ClassVar[dict[int, str]] = {}
    events: ClassVar[dict[str, str]] = {}
    """The meaning of each event type it records (rendered into ``docs/protocol.md``)."""
    """Its tables: schema version → the statements that version adds (:func:`hermesd.store.schema`)."""
    on_demand: ClassVar[tuple[str, ...]] = ()
    """The modules of its implementation it imports only at their first use (a service made by its
    first op or hook): a daemon with no job of its kinds holds none of them (its idle memory,
    bench/README.md; ``tests/test_daemon_footprint.py`` checks)."""

    def __init__(self, ctx: "Context"):
        self.ctx = ctx

    @classmethod
    def op_modules(cls) -> tuple[ModuleType, ...]:
        """The modules whose ``@op`` handlers are this plugin's ops: its own module."""
        return (sys.modules[cls.__module__],)

    @classmethod
    def warm_providers(cls, config: "Config") -> tuple[str | None, ...]:
        """The providers its children are likely to call under ``config``, whose SDKs the zygote
        preloads (read from the class before any plugin starts: the zygote warms up first); None
        entries are left out."""
        return ()

    @classmethod
    def warm_modules(cls, config: "Config") -> tuple[str, ...]:
        """Modules of the child runtime its children are likely to use under ``config``, which the
        zygote imports besides the providers' SDKs (read from the class, as :meth:`warm_providers`)."""
        return ()

    # jobs of this plugin's kinds ------------------------------------------------

    @own
    def spec_defaults(self, row: Row) -> dict[str, Any]:
        """What a child of this kind gets unless its job says otherwise (``child.hello``, before
        the job's row and ``spec``): :class:`hermesd.contract.wire.JobSpec` field → value; ``provider``
        and ``model`` None fall back to the config's.  None declared: the spec's own defaults."""
        return {}

    @own
    def stale_after(self, row: Row | None) -> float | None:
        """Seconds without activity after which a live job of this kind is interrupted as stale
        (``Runner.check_stale``, :mod:`hermesd.control.staleness`); None (declared by none): never."""
        return None

    @own
    def resume_on_restart(self, row: Row) -> bool:
        """Whether a job of a kind that keeps a journal (``at_restart="journal"``) found running
        at restart, or interrupted by a graceful stop, resumes from it (:mod:`hermesd.resume`);
        False: it ends ``lost``."""
        return True

    @own
    def spec(self, row: Row, spec: "JobSpec") -> None:
        """Add to the spec a child of this kind receives (``child.hello``)."""

    @own
    def on_result(self, row: Row, result: "JobResult") -> None:
        """A child reported its result, before the terminal transition."""

    @own
    def on_terminal(self, row: Row) -> list[dict[str, Any]]:
        """Inside the terminal transition's transaction (a ``JobTable`` terminal hook); returns
        extra events to publish after commit."""
        return []

    @own
    def on_exit(self, row: Row | None) -> None:
        """The job is terminal and its process reaped (slots released); :meth:`after_exit` follows."""

    @own
    def stop(self, row: Row, reason: str) -> None:
        """Stop a live job of a kind without a process (``cancel``); it ends through its own transition."""

    # everything -----------------------------------------------------------------

    @every
    def admit(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        """Any job is about to be admitted (``Runner.submit``): may change its row's ``fields``
        (e.g. its ``spec``) or refuse it by raising ``ProtocolError`` (the first refusal stops it)."""

    @every
    def child_env(self, row: Row) -> dict[str, str]:
        """Environment variables any job's child starts with (``Runner`` at its start, beside the
        job's own ``env``), e.g. its log's cap (:data:`hermesd.contract.launch.LOG_CAP_ENV`)."""
        return {}

    @every
    def any_spec(self, row: Row, spec: "JobSpec") -> None:
        """Add to the spec any job's child receives (``child.hello``), before the job's own ``spec``
        and its kind's :meth:`spec` hook, e.g. the tools that wait for a person (``approval_tools``)."""

    @every
    def any_result(self, row: Row, result: "JobResult") -> None:
        """Any job's child reported its result, before the terminal transition (after its own
        plugin's :meth:`on_result`), e.g. what its git worktree holds (:mod:`hermesd.worktrees.ops`)."""

    @every
    def after_exit(self, row: Row | None) -> None:
        """Any job is terminal and reaped (e.g. its foreground children end too)."""

    @every
    def on_event(self, event: dict[str, Any]) -> None:
        """Any event, after it is published (in process; an ``EventLog`` listener)."""

    @every
    def configure(self, config: "Config") -> None:
        """At start (once the plugins exist, before any job is queued) and after each reload:
        apply what of ``config`` is this plugin's — the limits of the pools its jobs hold
        (``ctx.scheduler.set_limit``, ``prefix_limits``), its timers' settings."""

    @every
    def status(self) -> dict[str, Any]:
        """Fields this plugin adds to the ``status`` reply (only reads)."""
        return {}

    @every
    def restore(self) -> None:
        """Start-up, after the jobs are reconciled: resume work."""

    @every
    def settling(self) -> float:
        """Shutdown, once the children are stopped: how many seconds more its work still running
        (a job-end hook's command) may take, 0 when none; the daemon waits, reaping, until every
        plugin says 0 or the longest of their first answers has passed."""
        return 0.0

    @every
    def shutdown(self) -> None:
        """Shutdown, after the children are stopped and before the sockets close."""


HOOKS: dict[str, str] = {name: fn.scope for name, fn in vars(Plugin).items() if hasattr(fn, "scope")}
"""Every hook of :class:`Plugin` by name, with its scope (``own`` or ``every``)."""


class Plugins:
    """The plugins of one daemon: the kinds they declare and their hooks, by kind.

    Has one method per hook of :data:`HOOKS`, with the hook's signature: an ``own``
    hook calls the plugin of the job's kind (a job of no plugin's kind gets
    :class:`Plugin`'s default: nothing, ``[]``); an ``every`` hook calls every
    plugin, in order.  Raises ``ValueError`` at construction when two plugins
    declare the same kind or id prefix.
    """

    def __init__(self, classes: Iterable[type[Plugin]] = ()):
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
        self._nobody = Plugin.__new__(Plugin)  # the owner of a kind no plugin declares: the default hooks

    def event_meanings(self) -> dict[str, str]:
        """What every event type means: the core's (:data:`hermesd.events.CORE_EVENTS`), then each plugin's."""
        return {**CORE_EVENTS, **{etype: text for cls in self.classes for etype, text in cls.events.items()}}

    def migrations(self) -> list[str]:
        """The whole schema's migrations: the core's, then each plugin's, by version."""
        return schema(CORE_MIGRATIONS, *(cls.migrations for cls in self.classes))

    def op_modules(self) -> list[ModuleType]:
        """Every plugin's op modules, in plugin order."""
        return [m for cls in self.classes for m in cls.op_modules()]

    def warm_providers(self, config: "Config") -> tuple[str | None, ...]:
        """Every plugin's :meth:`Plugin.warm_providers`, in plugin order."""
        return tuple(p for cls in self.classes for p in cls.warm_providers(config))

    def warm_modules(self, config: "Config") -> tuple[str, ...]:
        """Every plugin's :meth:`Plugin.warm_modules`, in plugin order, once each."""
        return tuple(dict.fromkeys(m for cls in self.classes for m in cls.warm_modules(config)))

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

    def owner(self, row: Row | None) -> Plugin:
        """The plugin of the job ``row``'s kind (a default one for a kind none declares, or no row)."""
        return self._owner.get(row["kind"], self._nobody) if row else self._nobody


def _call(name: str, scope: str) -> Any:
    """The :class:`Plugins` method of hook ``name`` (see :class:`Plugins`)."""
    if scope == "own":
        def call(self: Plugins, row: Row | None, *args: Any) -> Any:
            return getattr(self.owner(row), name)(row, *args)
    else:
        def call(self: Plugins, *args: Any) -> list[Any]:
            return [getattr(plugin, name)(*args) for plugin in self.instances]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f":meth:`Plugin.{name}` of " + ("the job's plugin." if scope == "own" else
                                                     "every plugin, in order; their answers, in order.")
    return call


for _name, _scope in HOOKS.items():
    setattr(Plugins, _name, _call(_name, _scope))
