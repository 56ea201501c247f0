"""Operator callbacks: ``hooks.on_job_end`` runs a command for every job that ends.

The command (``/bin/sh -c``) gets the job record (``hermesd.jobs.record``, the
``ps``/``wait`` shape, as one JSON object) on its standard input and
``HERMES_JOB_ID``/``HERMES_JOB_STATUS`` in its environment (like pueue's
callback).  It runs in a process group of its own, awaited on the event loop, in
``HERMES_HOME/jobs/ID/`` with its output in ``hook.log`` there, under
``hooks.timeout_seconds``: past it the whole group is killed.  A hook that
fails, cannot start or is too slow is logged (``daemon.log``: the job, the
exit status, the end of its output); it never blocks the event loop, never
delays a job or another hook; a stopping daemon waits for it (within its time
limit: :meth:`JobEndHooks.settling`), the hooks of the jobs the
shutdown ended included, then kills what is left.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hermesd import jobs as jobs_mod
from hermesd.plugin import Plugin
from hermesd.system.procs import child_env

if TYPE_CHECKING:
    from hermesd.context import Context

log = logging.getLogger("hermesd")

LOG_TAIL_BYTES = 500


class JobEndHooks(Plugin):
    """Run ``hooks.on_job_end`` once per job that turns terminal: a plugin without a
    job kind whose hooks are :meth:`on_event` (a job ended), :meth:`status`, :meth:`settling` and :meth:`shutdown`.

    From ``ctx``: the config in force (a reload changes the command), the job
    table, each job's directory, the environment hooks start from (the daemon's,
    scrubbed like a child's) and the reaper's ``watch``.
    """

    def __init__(self, ctx: "Context"):
        super().__init__(ctx)
        self.config: Callable[[], Any] = lambda: ctx.config
        self.get_row: Callable[[str], dict[str, Any] | None] = ctx.jobs.get
        self.job_dir: Callable[[str], Path] = ctx.runner.job_dir
        self.env = child_env(dict(os.environ), {})
        self.watch: Callable[[int, Callable[[int], None]], None] = ctx.procs.watch
        ctx.provide(self, JobEndHooks)  # as ctx.service(JobEndHooks), whatever plugin class it is
        self.running: dict[asyncio.Task, str] = {}
        self.pids: set[int] = set()

    def settling(self) -> float:
        """The commands still running may take ``hooks.timeout_seconds`` (then they are killed), and a
        second for the kill; 0 when none runs."""
        return self.config().hooks.timeout_seconds + 1.0 if self.running else 0.0

    def status(self) -> dict[str, Any]:
        """``hooks``: ``on_job_end``, whether a command runs when a job ends (``status``)."""
        return {"hooks": {"on_job_end": bool(self.config().hooks.on_job_end)}}

    def on_event(self, event: dict[str, Any]) -> None:
        """A ``job.state`` event into a terminal state starts the hook for that job."""
        if event.get("type") != "job.state" or (event.get("data") or {}).get("status") not in jobs_mod.TERMINAL:
            return
        command = self.config().hooks.on_job_end
        row = self.get_row(event.get("job") or "")
        if not command or row is None:
            return
        task = asyncio.get_running_loop().create_task(self.run(command, row))
        self.running[task] = row["id"]
        task.add_done_callback(lambda t: self.running.pop(t, None))

    async def run(self, command: str, row: dict[str, Any], *, what: str = "hooks.on_job_end",
                  record: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> int | None:
        """Run ``command`` for the job ``row``; returns its exit status (negative: killed by that
        signal; None: not started).  Never raises: what goes wrong is logged.  ``what``: the
        hook's name in the log; ``record``: what its standard input gets (default: the job's
        record); ``env``: variables added to its environment.

        The daemon reaps every process it has (a child subreaper, ``waitpid(-1)``), so the
        hook's exit status comes from that reaping (``watch``), not from asyncio's watcher.
        """
        job, limit = row["id"], self.config().hooks.timeout_seconds
        directory = self.job_dir(job)
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            import tempfile  # here: it imports shutil and random, not needed by a daemon without hooks

            with tempfile.TemporaryFile(dir=directory) as stdin, open(directory / "hook.log", "ab") as out:
                stdin.write(json.dumps(jobs_mod.record(row) if record is None else record, ensure_ascii=False,
                                       default=str).encode() + b"\n")
                stdin.seek(0)  # a file, not a pipe: a hook that does not read never blocks the daemon
                proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=stdin, stdout=out, stderr=out,
                                        cwd=directory, start_new_session=True,
                                        env={**self.env, "HERMES_JOB_ID": job, "HERMES_JOB_STATUS": str(row["status"]),
                                             **(env or {})})
        except (OSError, ValueError) as exc:
            log.warning("%s for %s could not start: %s", what, job, exc)
            return None
        self.watch(proc.pid, lambda code: exited.done() or exited.set_result(code))
        self.pids.add(proc.pid)
        try:
            code = await asyncio.wait_for(asyncio.shield(exited), limit)
        except asyncio.TimeoutError:
            self._kill(proc.pid)
            code = await exited
            log.warning("%s for %s took longer than hooks.timeout_seconds=%g: killed; output: %s",
                        what, job, limit, self._tail(directory))
            return code
        finally:
            self.pids.discard(proc.pid)
            proc.returncode = exited.result() if exited.done() else None  # reaped by the daemon, not by Popen
        if code:
            log.warning("%s for %s failed with exit status %s; output: %s", what, job, code,
                        self._tail(directory))
        return code

    @staticmethod
    def _kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _tail(self, directory: Path) -> str:
        try:
            with open(directory / "hook.log", "rb") as fh:
                fh.seek(max(0, fh.seek(0, 2) - LOG_TAIL_BYTES))
                return repr(fh.read().decode("utf-8", "replace").strip())
        except OSError:
            return "''"

    def shutdown(self) -> None:
        """The daemon stops: kill the process groups of the hooks still running."""
        for pid in list(self.pids):
            self._kill(pid)
