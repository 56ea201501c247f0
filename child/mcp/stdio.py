"""A stdio MCP server as a process of the child: in its process group, its environment named.

The SDK's ``stdio_client`` (``mcp.client.stdio``) starts a server in a session of its own, so
that it can kill the server's tree.  A child's processes must instead stay in the child's
process group, the unit hermesd stops, kills on a timeout, reaps after a ``kill -9`` and the
child's lifeline takes along when the daemon dies (:mod:`child.lifeline`,
:mod:`hermesd.system.procs`): so :func:`install` makes the SDK start the server there (its
``_create_platform_compatible_process``, without ``start_new_session``) and, when a server
outlives its closed stdin, stop that process itself (its ``terminate_posix_process_tree``,
which would signal a group of the server's own).  The child's limits (rlimits, its cgroup) and
its ``PR_SET_PDEATHSIG``-free children inherit as for a terminal command.  Everything else —
the pipes, the JSON-RPC framing, the shutdown sequence of the MCP specification — is the SDK's.

The server's environment (:func:`environment`) is the SDK's default (``HOME``, ``LOGNAME``,
``PATH``, ``SHELL``, ``TERM``, ``USER``) and what its config names, ``${NAME}`` expanded from
the child's environment: no provider key, no ``HERMES_*`` variable unless named.  In a job
with a container (:mod:`child.container`) the server runs inside it (``ENGINE exec -i``,
:func:`in_container`): there its environment is the image's and what its config names, passed
as ``--env NAME`` with the values in the engine client's environment — never on a command line
that ``ps`` shows —, the client's being that of the job's other engine commands (the tools'
environment, :func:`child.redact.tool_environment`: the engine's own variables such as
``XDG_RUNTIME_DIR`` or ``DOCKER_HOST`` stay, the child's secrets do not).
"""

from __future__ import annotations

import contextvars
import os
import re
import signal
from typing import Any, Callable

import anyio
from mcp.client import stdio as sdk_stdio

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""``${NAME}`` in a value of ``env`` or ``headers``: the child's variable ``NAME``."""


class Unset(ValueError):
    """A ``${NAME}`` of a server's settings names a variable the child does not have."""


def expand(values: dict[str, str], where: str, environ: Any = None) -> dict[str, str]:
    """``values`` with every ``${NAME}`` replaced by the variable's value.  Raises :class:`Unset`
    naming ``where`` and the variable."""
    environ = os.environ if environ is None else environ

    def one(match: re.Match[str]) -> str:
        if match.group(1) not in environ:
            raise Unset(f"{where}: ${{{match.group(1)}}} names a variable hermesd's environment does not have")
        return environ[match.group(1)]

    return {key: VARIABLE.sub(one, value) for key, value in values.items()}


def environment(env: dict[str, str]) -> dict[str, str]:
    """The whole environment of a stdio server with ``env`` (expanded) from its config."""
    return {**sdk_stdio.get_default_environment(), **env}


def in_container(container: Any, command: str, args: list[str], env: dict[str, str],
                 cwd: str | None) -> tuple[str, list[str], dict[str, str]]:
    """``(command, args, environment)`` of the engine client running the server inside the job's
    ``container`` (a :class:`child.container.Container`): ``ENGINE exec -i`` with each variable
    of ``env`` as ``--env NAME`` (its value in ``environment``, see the module doc), in ``cwd``
    as a path inside (:meth:`child.container.Container.inside_path`: a relative one from the
    job's directory there) or the container's working directory."""
    from child.redact import tool_environment

    pairs = [a for key in env for a in ("--env", key)]
    workdir = container.inside_path(cwd) if cwd else container.workdir
    argv = [*container.engine, "exec", "-i", *pairs, "--workdir", workdir, container.id, command, *args]
    return argv[0], argv[1:], {**tool_environment(), **env}


STARTED: contextvars.ContextVar[Callable[[Any], None] | None] = contextvars.ContextVar("mcp_started", default=None)
"""Called with the server's process (anyio's ``Process``) once started, in the task that
opens the transport (:class:`child.mcp.client.Servers` watches its exit that way)."""


async def _in_the_childs_group(command: str, args: list[str], env: dict[str, str] | None = None,
                               errlog: Any = None, cwd: Any = None) -> Any:
    """The SDK's process start (same parameters), in the child's own process group."""
    process = await anyio.open_process([command, *args], env=env, stderr=errlog, cwd=cwd)
    started = STARTED.get()
    if started is not None:
        started(process)
    return process


STOP_GRACE_SECONDS = 2.0
"""Seconds between SIGTERM and SIGKILL of a server that outlived its closed stdin (the SDK's
``FORCE_KILL_TIMEOUT``)."""


async def _stop_server(process: Any, timeout_seconds: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the server, SIGKILL it after ``timeout_seconds``: the process itself (what it
    started is in the child's group, which hermesd kills when the child is reaped)."""
    for sig, wait in ((signal.SIGTERM, timeout_seconds), (signal.SIGKILL, 0.0)):
        try:
            os.kill(process.pid, sig)
        except ProcessLookupError:
            return
        with anyio.move_on_after(wait):
            while process.returncode is None:
                await anyio.sleep(0.01)
            return


def install() -> None:
    """Make the SDK's stdio transport start servers in the child's process group (see the module
    doc).  Raises ``ImportError`` when the SDK no longer has the functions replaced."""
    for name in ("_create_platform_compatible_process", "terminate_posix_process_tree", "get_default_environment"):
        if not hasattr(sdk_stdio, name):
            raise ImportError(f"mcp.client.stdio has no {name} (mcp {getattr(sdk_stdio, '__version__', '?')}); "
                              "child.mcp.stdio needs updating for this version of the mcp SDK")
    sdk_stdio._create_platform_compatible_process = _in_the_childs_group
    sdk_stdio.terminate_posix_process_tree = _stop_server


install()
