"""The process manager's start strategy for ``supervisor.start_method``.

:func:`make_spawner` gives :class:`hermesd.system.procs.ColdSpawner` for ``spawn`` and
:class:`WarmSpawner` for ``forkserver`` (the default).  The warm one hands a
job to a spare the zygote forked ahead of time (:mod:`hermesd.warm.client`);
with none at hand it starts the child cold at once, through the same cold
spawner, while the spares catch up.  Either way the child is the daemon's own
(reaped, signalled and swept exactly alike).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Callable

from hermesd.system.procs import OS, ColdSpawner, Spawner, child_env
from hermesd.warm.client import ZygoteClient
from hermesd.warm.wire import BASE_URL_ENV, OWNER_ENV, PROVIDERS_ENV


class WarmSpawner:
    """``supervisor.start_method: forkserver``: a held spare, else a cold start.

    ``cold``: the fallback; ``zygote``: the daemon's handle on the zygote.
    """

    method = "forkserver"

    def __init__(self, cold: ColdSpawner, zygote: ZygoteClient):
        self.cold = cold
        self.zygote = zygote
        self.starts = {"warm": 0, "cold": 0}

    def start(self) -> None:
        """Start the zygote (it warms up in the background)."""
        self.zygote.start()

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """Hand the job to a spare, or start ``argv`` cold at once; see the class doc.

        What a cold start would refuse is refused first (the spare sets itself up
        after the handoff, when no one could be told): raises ``OSError`` for a
        log that cannot be opened or a missing ``cwd``.
        """
        os.close(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600))
        if not os.path.isdir(cwd):
            raise FileNotFoundError(errno.ENOENT, "No such directory", cwd)
        handle = self.zygote.spawn(cwd=cwd, env=env, log_path=str(log_path))
        if handle is None:
            handle = self.cold.spawn(argv, cwd=cwd, env=env, log_path=log_path)
            self.starts["cold"] += 1
        else:
            self.starts["warm"] += 1
        return handle

    def expect(self, provider: str | None) -> None:
        """A job runs with ``provider``: the zygote imports its SDK, if it has not, for the
        spares to come (see :meth:`ZygoteClient.preload`)."""
        self.zygote.preload(provider)

    def at_hand(self) -> bool:
        """Would a child started now start warm, or is waiting pointless (see
        :meth:`ZygoteClient.at_hand`)?"""
        return self.zygote.at_hand()

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (soon, from the loop) each time :meth:`at_hand` may have turned true."""
        self.zygote.listeners.append(callback)

    def reaped(self, exits: list[tuple[int, int]]) -> None:
        """A zygote among ``exits`` is replaced, a held spare dropped."""
        self.zygote.reaped(exits)

    def describe(self) -> dict[str, Any]:
        """``{"method": "forkserver", "zygote": pid or None (not warm), "spares": held,
        "starts": {"warm": n, "cold": n}}`` (starts since the daemon started), with
        ``cold_reason`` when the zygote could not start."""
        return {"method": self.method, **self.zygote.describe(), "starts": dict(self.starts)}

    def own_pids(self) -> frozenset[int]:
        """The zygote's pid and the held spares' (see :meth:`ZygoteClient.own_pids`)."""
        return self.zygote.own_pids()

    def close(self) -> None:
        """Stop the zygote and the spares held."""
        self.zygote.close()


def make_spawner(start_method: str, loop: Any, supervisor_id: str = "", children_socket: Path | None = None,
                 os_seam: OS | None = None, providers: tuple[str | None, ...] = (),
                 base_url: str | None = None, modules: tuple[str, ...] = ()) -> Spawner:
    """The spawner for ``supervisor.start_method``: ``forkserver`` (:class:`WarmSpawner`;
    its spares connect to ``children_socket`` ahead of time; its zygote imports the SDKs
    of ``providers``, the config's, else of the default provider for ``base_url``, and ``modules``) or
    ``spawn`` (:class:`~hermesd.system.procs.ColdSpawner`, a new interpreter per child)."""
    cold = ColdSpawner(os_seam or OS())
    if start_method != "forkserver":
        return cold
    extra = {OWNER_ENV: supervisor_id, "HERMES_DAEMON_PID": str(os.getpid()),
             PROVIDERS_ENV: ",".join(dict.fromkeys(p for p in providers if p)), BASE_URL_ENV: base_url or ""}
    if children_socket is not None:
        extra["HERMES_CHILD_SOCKET"] = str(children_socket)
    return WarmSpawner(cold, ZygoteClient(child_env(os.environ, extra), loop, more=modules))
