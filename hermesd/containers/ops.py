"""The containers plugin (no job kind: its hooks see every job): a job's ``container`` spec
made at admission, its containers removed when it ends, the start-up sweep of what a
``kill -9``ed daemon left (:mod:`hermesd.containers.engine`, imported only for a job with
a container, or at start when this daemon may have started one: an idle daemon whose jobs
run on the host does without, bench/README.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from hermesd.plugin import Plugin

CONTAINER_ENGINES = ("SELECT 1 FROM jobs WHERE json_extract(spec, '$.container.engine') IS NOT NULL LIMIT 1")
"""Whether a job of the table had a container (:func:`hermesd.containers.engine.engines_used` lists their engines)."""


class ContainersPlugin(Plugin):
    """The containers of every job kind (see :mod:`hermesd.containers.engine`): ``prepare`` at
    admission, ``remove_for_job`` once a job is terminal and reaped, and ``sweep`` at
    start-up.  It declares no job kind and no op."""

    on_demand = ("hermesd.containers.engine",)

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._sweep: asyncio.Task | None = None

    def admit(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        """``prepare`` with the config in force, for a job with an ``image`` or under a container
        ``terminal.backend``; raises ``ProtocolError(bad_request)``."""
        if (fields.get("spec") or {}).get("image") or self.ctx.config.terminal.backend != "local":
            from hermesd.containers.engine import prepare

            prepare(self.ctx.config, job_id, fields)

    def after_exit(self, row: dict[str, Any] | None) -> None:
        """``remove_for_job`` (in a worker thread) of a job that had a container."""
        if ((row or {}).get("spec") or {}).get("container"):
            from hermesd.containers.engine import remove_for_job

            remove_for_job(self.ctx.loop, row)

    def restore(self) -> None:
        """Start ``sweep`` as a task (the engine is slow; the daemon starts meanwhile) when a job had a
        container or ``terminal.backend`` is one."""
        if self.ctx.config.terminal.backend != "local" or self.ctx.store.db.execute(CONTAINER_ENGINES).fetchone():
            from hermesd.containers.engine import sweep

            self._sweep = self.ctx.loop.create_task(sweep(self.ctx.loop, self.ctx.jobs, self.ctx.config))

    def shutdown(self) -> None:
        """Cancel a sweep still under way (its engine command ends in its worker thread)."""
        if self._sweep is not None:
            self._sweep.cancel()
