"""``mcp.tools``: what an MCP server offers, asked of the server itself by a probe process.

The daemon imports no SDK, so :func:`probe` runs ``python -m child.mcp.probe`` (the child's
MCP client, :mod:`child.mcp.probe`) with the server's settings on its standard input, in a
process group of its own, awaited on the event loop (its exit status from the daemon's
reaper, ``ProcessManager.watch``, as a hook's), its output in files under the state
directory (never a pipe the daemon must drain), killed with its server past the server's
``connect_timeout_seconds`` and a margin, or sooner past the caller's own timeout (``hermesctl
--timeout``).  It dies with the daemon (its lifeline).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from typing import Any

from hermesd.contract.launch import PYTHON
from hermesd.mcp.config import Server
from hermesd.redaction import SECRETS_ENV
from hermesd.system.procs import child_env

MARGIN_SECONDS = 15.0
"""Seconds a probe may take beyond its server's ``connect_timeout_seconds`` (Python and the SDK starting)."""


async def probe(ctx: Any, server: Server, cwd: str | None = None, timeout: float | None = None) -> dict[str, Any]:
    """The server's tools as :mod:`child.mcp.probe` prints them, the probe run in ``cwd`` (a job's
    directory, where the server's own ``cwd`` is relative to; default: the state directory); when the
    probe itself fails, ``state`` ``failed`` and an ``error`` with the end of its stderr.  It may take
    its server's ``connect_timeout_seconds`` and :data:`MARGIN_SECONDS`, or ``timeout`` seconds (the
    caller's) when fewer: past that it is killed with its server, ``state`` ``timed_out`` and an
    ``error`` saying within what (``did not list its tools within 3s (…)``)."""
    import tempfile  # here, not at start: it imports shutil, and shutil bz2 and lzma (the idle daemon's memory)

    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()
    folder = ctx.config.state_dir()
    own = server.connect_timeout_seconds + MARGIN_SECONDS
    limit = own if timeout is None else min(own, timeout)
    timed_out = False
    with tempfile.TemporaryFile(dir=folder) as stdin, tempfile.TemporaryFile(dir=folder) as out, \
            tempfile.TemporaryFile(dir=folder) as err:
        stdin.write(json.dumps(server.to_wire()).encode())
        stdin.seek(0)
        proc = subprocess.Popen([*PYTHON, "-m", "child.mcp.probe"], stdin=stdin, stdout=out, stderr=err,
                                cwd=cwd or folder, start_new_session=True,
                                env=child_env(dict(os.environ), {"HERMES_DAEMON_PID": str(os.getpid()),
                                                                 SECRETS_ENV: ",".join(ctx.config.secrets)}))
        ctx.procs.watch(proc.pid, lambda code: exited.done() or exited.set_result(code))
        try:
            code = await asyncio.wait_for(asyncio.shield(exited), limit)
        except asyncio.TimeoutError:
            timed_out = True
            _kill(proc.pid)
            code = await exited
        finally:
            proc.returncode = exited.result() if exited.done() else None  # reaped by the daemon, not by Popen
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    if timed_out:
        why = ("the caller's timeout, hermesctl --timeout" if limit < own else
               f"its connect_timeout_seconds {server.connect_timeout_seconds:g} and {MARGIN_SECONDS:g}s for the probe")
        return {"name": server.name, "state": "timed_out", "tools": [], "seconds": limit,
                "error": f"did not list its tools within {limit:g}s ({why}); it was stopped"}
    try:
        return json.loads(text)
    except ValueError:
        return {"name": server.name, "state": "failed", "tools": [], "seconds": None,
                "error": f"the probe of it ended with exit status {code}: {errors.strip()[-600:] or 'no output'}"}


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
