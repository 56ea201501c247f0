"""What an op handler and a plugin get: the daemon's parts, typed, instead of the daemon.

A handler is ``async def handler(ctx: Context, args)`` (client ops) or
``async def handler(ctx: Context, job, args)`` (child ops).  Plugin services
are reached by their class: ``ctx.service(Dispatcher)`` is typed, and the
core never names them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hermesd.config import Config
from hermesd.events import EventLog
from hermesd.jobs import JobTable
from hermesd.scheduler import Scheduler
from hermesd.store import Store

if TYPE_CHECKING:
    from hermesd.paths import Sockets
    from hermesd.plugin import Plugins
    from hermesd.system.procs import ProcessManager
    from hermesd.router import Router
    from hermesd.runner import Runner

T = TypeVar("T")


class Control(Protocol):
    """The daemon-wide controls the admin ops need (``hermesd.server.Daemon`` is one)."""

    config: Config
    stopping: bool
    started_at: str
    sockets: "Sockets"
    loop_lag: Any
    """The event-loop lag probe (``hermesd.looplag``) or None."""

    def uptime(self) -> float:
        """Seconds since start (monotonic)."""

    def request_shutdown(self, reason: str) -> None:
        """Begin the graceful stop."""

    def reload(self) -> dict[str, Any]:
        """Re-read the config file; raises ``ProtocolError(invalid_config)``."""


@dataclass
class Context:
    """The parts of one daemon, made once the state database is open."""

    control: Control
    store: Store
    events: EventLog
    jobs: JobTable
    scheduler: Scheduler
    procs: "ProcessManager"
    runner: "Runner"
    plugins: "Plugins"
    router: "Router"
    loop: asyncio.AbstractEventLoop
    services: dict[type, Any] = field(default_factory=dict)

    @property
    def config(self) -> Config:
        """The config in force (a reload replaces it)."""
        return self.control.config

    @property
    def stopping(self) -> bool:
        """True once the graceful stop began."""
        return self.control.stopping

    def provide(self, service: T, cls: type | None = None) -> T:
        """Make ``service`` reachable as ``ctx.service(cls)`` (default ``type(service)``); returns it."""
        self.services[cls or type(service)] = service
        return service

    def service(self, cls: type[T]) -> T:
        """The service of class ``cls`` a plugin provided; raises ``KeyError`` when none did."""
        return self.services[cls]
