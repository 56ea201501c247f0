"""The container terminal backend: one container per job, commands through ``exec``.

hermesd describes the container in the job spec's ``container`` entry (see
``hermesd.containers.engine.prepare``: engine command line, image, name, labels,
options).  The child starts it when the job starts —
``ENGINE run -d --label hermes.job=ID --label hermes.state_dir=DIR … IMAGE``
with ``sleep`` as its only process —, runs each terminal command with
``ENGINE exec -w /workspace ID /bin/sh -c COMMAND`` and removes it
(``rm -f``) in a ``finally`` when the run ends.  If the child dies before
that, hermesd removes it by its labels (on the job's end, or at its next
start after a ``kill -9``).

``run`` and ``rm`` run in sessions of their own, without the ``HERMES_*``
variables: when hermesd stops the job's process group (SIGTERM, then SIGKILL)
or sweeps what the job left, they finish anyway, since podman interrupted
half-way can forget a container that still runs.

Inside: the job's working directory bind-mounted at ``workdir``
(``/workspace``), which is also the commands' working directory; no network
unless ``terminal.network``; the image is never pulled unless
``terminal.pull``; the job's resource limits as ``--ulimit`` values at or
below the child's own (:func:`ulimit_args`: an unprivileged engine cannot
raise them, and docker and podman otherwise ask for more open files and
processes than a limited host allows).  As a non-root user, docker runs the
commands as that user (``--user``) and rootless podman maps that user into
the container (``--userns keep-id``), so files written inside belong to
whoever runs hermesd.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from typing import Any, Iterator

from child.redact import passed, tool_environment

ULIMITS = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC, "fsize": resource.RLIMIT_FSIZE,
           "cpu": resource.RLIMIT_CPU, "data": resource.RLIMIT_DATA, "core": resource.RLIMIT_CORE}
"""The job's resource limits a container gets (names of ``docker run --ulimit``)."""

SLEEP_SECONDS = 2**31 - 1
"""The container's one process sleeps this long (about 68 years): it only has to exist."""

ENGINE_TIMEOUT_SECONDS = 30.0
"""Longest wait for ``rm`` and for killing a command's processes inside."""


class ContainerError(Exception):
    """The container could not be started: the engine's message (image not there, engine failing...)."""


def _detached_env() -> dict[str, str]:
    """The environment of an engine command that must outlive the job's processes: without
    the ``HERMES_*`` variables, by which hermesd finds (and kills) what a job left behind, and
    without the child's secrets (:func:`child.redact.tool_environment`)."""
    return {k: v for k, v in tool_environment().items() if not k.startswith("HERMES_")}


def ulimit_args(max_processes: int) -> list[str]:
    """``--ulimit name=SOFT:HARD`` for each of :data:`ULIMITS` this process has a (soft)
    limit for (``getrlimit``), never above it: ``nproc`` at most ``max_processes``, an
    unlimited hard limit given as the soft one.  ``nofile`` and ``nproc`` are always
    passed, so the engines' own defaults for them (more than a limited host allows)
    never apply."""
    args = []
    for name, res in ULIMITS.items():
        soft, hard = resource.getrlimit(res)
        if name == "nproc":
            hard = max_processes if hard == resource.RLIM_INFINITY else min(hard, max_processes)
            soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        if soft == resource.RLIM_INFINITY:
            continue  # unlimited: the engine's default (nofile never is)
        args += ["--ulimit", f"{name}={soft}:{soft if hard == resource.RLIM_INFINITY else hard}"]
    return args


class Container:
    """The container of one job.  ``desc``: the spec's ``container`` entry; ``cwd``: the
    job's working directory on the host (mounted at ``desc["workdir"]``)."""

    def __init__(self, desc: dict[str, Any], cwd: str):
        self.desc = desc
        self.engine: list[str] = list(desc["engine"])
        self.workdir: str = desc["workdir"]
        self.image: str = desc["image"]
        self.cwd = os.path.realpath(cwd)
        self.id: str = desc["name"]  # the engine's id once started; the name finds it too

    def run_argv(self) -> list[str]:
        """The ``run`` command line that starts the container (detached)."""
        d = self.desc
        if "," in self.cwd:
            raise ContainerError(f"the working directory {self.cwd!r} contains a comma, which a bind mount "
                                 "cannot name; use another directory")
        argv = [*self.engine, "run", "-d", "--name", d["name"], "--stop-signal", "KILL",
                "--pull", "missing" if d.get("pull") else "never"]
        for key, value in d["labels"].items():
            argv += ["--label", f"{key}={value}"]
        if not d.get("network"):
            argv += ["--network", "none"]
        argv += ulimit_args(int(d.get("max_processes") or 4096))
        if d.get("memory_mb"):  # the job's memory limit (the child itself has no RLIMIT_AS then)
            argv += ["--memory", f"{int(d['memory_mb'])}m"]
        if d["kind"] == "docker" and d.get("runtime"):
            argv += ["--runtime", d["runtime"]]
        if os.getuid() != 0:  # files written inside belong to whoever runs hermesd
            argv += ["--userns", "keep-id"] if d["kind"] == "podman" else ["--user", f"{os.getuid()}:{os.getgid()}"]
        argv += ["--mount", f"type=bind,source={self.cwd},target={self.workdir}", "--workdir", self.workdir,
                 "--entrypoint", "sleep", self.image, str(SLEEP_SECONDS)]
        return argv

    def start(self) -> None:
        """Start the container.  Raises :class:`ContainerError` with the engine's message
        (e.g. the image is not there and ``pull`` is off) or after ``start_timeout_seconds``."""
        timeout = float(self.desc.get("start_timeout_seconds") or 60)
        try:
            done = subprocess.run(self.run_argv(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=timeout, start_new_session=True, env=_detached_env())  # see _quietly
        except subprocess.TimeoutExpired:
            self.remove()
            raise ContainerError(f"starting a container of {self.image!r} took more than {timeout:g}s "
                                 "(terminal.start_timeout_seconds)") from None
        except OSError as exc:
            raise ContainerError(f"cannot run the container engine {self.engine[0]}: {exc}") from None
        if done.returncode != 0:
            self.remove()
            raise ContainerError(f"could not start a container of image {self.image!r} with "
                                 f"{os.path.basename(self.engine[0])}: {done.stderr.strip()[-1500:]}")
        self.id = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else self.id

    def exec_argv(self, command: str, env: dict[str, str] | None = None) -> list[str]:
        """The command line running shell ``command`` inside, in the mounted directory, with the
        variables the job was given and ``terminal.pass_env`` (:func:`child.redact.passed`) added
        to the image's environment as ``--env NAME`` — the engine takes their values from its own
        environment, so no value is on its command line — and ``env`` as ``--env NAME=VALUE``."""
        pairs = [arg for name in passed() for arg in ("--env", name)]
        pairs += [arg for key, value in (env or {}).items() for arg in ("--env", f"{key}={value}")]
        return [*self.engine, "exec", *pairs, "--workdir", self.workdir, self.id, "/bin/sh", "-c", command]

    def kill_commands(self) -> None:
        """Kill every process inside but the container's own (``kill -KILL -1`` from inside):
        what a timed-out or interrupted command left running."""
        self._quietly([*self.engine, "exec", self.id, "/bin/sh", "-c", "kill -KILL -1"], session=False)

    def host_path(self, path: str) -> str:
        """``path`` as a file tool takes it: one under :attr:`workdir` (the model sees the
        directory from inside) made relative to the working directory; others unchanged."""
        if path == self.workdir or path.startswith(self.workdir.rstrip("/") + "/"):
            return os.path.relpath(path, self.workdir)
        return path

    def remove(self) -> None:
        """Remove the container at once, running or not; failures go to the job's log."""
        self._quietly([*self.engine, "rm", "-f", self.id])

    @staticmethod
    def _quietly(argv: list[str], session: bool = True) -> None:
        """Run an engine command, its failure only logged.  ``session``: in a session of
        its own, so the signals that stop the job's process group cannot cut it short —
        an ``rm`` (or ``run``) killed half-way can leave the container running where the
        engine no longer lists it, beyond any removal by label."""
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=ENGINE_TIMEOUT_SECONDS, start_new_session=session,
                                  env=_detached_env() if session else tool_environment())
            if done.returncode != 0 and "no such" not in done.stderr.lower():
                print(f"container: {' '.join(argv[1:3])} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"container: {' '.join(argv[1:3])} failed: {exc}", file=sys.stderr)


@contextlib.contextmanager
def opened(desc: dict[str, Any] | None, cwd: str) -> Iterator[Container | None]:
    """The job's container for the ``with`` block (None when the job has none): started
    on entry, removed on exit whatever happens.  Raises :class:`ContainerError` on entry."""
    if not desc:
        yield None
        return
    box = Container(desc, cwd)
    box.start()
    try:
        yield box
    finally:
        box.remove()
