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
(``/workspace``), which is also the commands' working directory — for a job
with a git worktree of its own (:mod:`child.worktree`), the worktree's top
level there (the commands run in the job's directory below it) and, read-write
at the paths the worktree's files name (:func:`hermesd.worktrees.git.linked_layout`),
the repository's git directory, where the worktree's ``.git`` file points and
the job's branch lives, and the worktree itself, so that git inside works on the
job's branch as on the host (:meth:`Container.mounts`); no network
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
import posixpath
import resource
import subprocess
import sys
from typing import Any, Iterator

from child.redact import passed, tool_environment
from hermesd.system import rlimits
from hermesd.worktrees.git import GitError, linked_layout

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


def _top_of(worktree: Any) -> str | None:
    """The top level of ``worktree`` (a spec's, :func:`hermesd.worktrees.git.plan`), resolved; None without one."""
    return os.path.realpath(worktree["path"]) if isinstance(worktree, dict) and worktree.get("path") else None


def placed(mount_point: str, cwd: str, worktree: dict[str, Any] | None) -> tuple[str, str]:
    """``(top, workdir)`` of a job working in ``cwd``: the host directory mounted at ``mount_point``
    (the top level of the job's ``worktree`` when ``cwd`` is in it, else ``cwd``) and where
    ``cwd`` is inside, the commands' working directory (``/workspace/src`` for ``WORKTREE/src``)."""
    cwd, top = os.path.realpath(cwd), _top_of(worktree)
    inside = os.path.relpath(cwd, top) if top else "."
    if inside == ".." or inside.startswith("../"):  # not in its worktree (never so): the directory alone
        top, inside = cwd, "."
    return top or cwd, mount_point if inside == "." else posixpath.join(mount_point, inside)


class Container:
    """The container of one job.  ``desc``: the spec's ``container`` entry; ``cwd``: the
    job's working directory on the host; ``worktree``: the job's git worktree (the spec's
    ``worktree``, :func:`hermesd.worktrees.git.plan`), or None.

    ``mount_point`` (``desc["workdir"]``) is where ``top`` — the worktree's top level, else
    ``cwd`` — is mounted; ``workdir``, where ``cwd`` is then, is the commands' working directory."""

    def __init__(self, desc: dict[str, Any], cwd: str, worktree: dict[str, Any] | None = None):
        self.desc = desc
        self.engine: list[str] = list(desc["engine"])
        self.mount_point: str = desc["workdir"]
        self.image: str = desc["image"]
        self.cwd = os.path.realpath(cwd)
        self.top, self.workdir = placed(self.mount_point, self.cwd, worktree)
        self.worktree = worktree if self.top == _top_of(worktree) else None  # None: cwd is not in it
        self.id: str = desc["name"]  # the engine's id once started; the name finds it too

    def mounts(self) -> list[tuple[str, str]]:
        """``(host directory, path inside)`` of each read-write bind mount: :attr:`top` at
        :attr:`mount_point`; for a job with a worktree also the repository's git directory and
        the worktree at the paths the worktree's files name (see the module doc).  Raises
        :class:`ContainerError` for a directory a bind mount cannot name (a comma), a path
        inside that would lie in (or over) the mount point, or a worktree whose files git
        cannot be given."""
        pairs = [(self.top, self.mount_point)]
        if self.worktree:
            try:
                layout = linked_layout(self.top)
            except GitError as exc:
                raise ContainerError(f"cannot give git in the container the job's worktree: {exc}") from None
            pairs += [(os.path.realpath(layout["common"]), layout["common"]), (self.top, layout["worktree"])]
        for source, target in pairs:
            if "," in source + target:
                raise ContainerError(f"the directory {source!r} contains a comma, which a bind mount cannot name; "
                                     "use another directory")
            if target != self.mount_point and (posixpath.commonpath([target, self.mount_point])
                                               in (target, self.mount_point)):
                raise ContainerError(f"cannot mount {source} at {target} in the container: it would overlap "
                                     f"{self.mount_point}, where the job's directory is")
        return pairs

    def run_argv(self) -> list[str]:
        """The ``run`` command line that starts the container (detached).  Raises
        :class:`ContainerError` (:meth:`mounts`)."""
        d = self.desc
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
        for source, target in self.mounts():
            argv += ["--mount", f"type=bind,source={source},target={target}"]
        argv += ["--workdir", self.workdir, "--entrypoint", "sleep", self.image, str(SLEEP_SECONDS)]
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

    def exec_argv(self, command: str, env: dict[str, str] | None = None, run: str | None = None) -> list[str]:
        """The command line running shell ``command`` inside, in the job's directory, with the
        variables the job was given and ``terminal.pass_env`` (:func:`child.redact.passed`) added
        to the image's environment as ``--env NAME`` — the engine takes their values from its own
        environment, so no value is on its command line —, ``env`` as ``--env NAME=VALUE``, and
        the command's run id ``run`` as its ``HERMES_TOOL_RUN`` (:meth:`kill_commands`)."""
        pairs = [arg for name in passed() for arg in ("--env", name)]
        pairs += [arg for key, value in (env or {}).items() for arg in ("--env", f"{key}={value}")]
        pairs += ["--env", f"{rlimits.TOOL_RUN_ENV}={run}"] if run else []
        return [*self.engine, "exec", *pairs, "--workdir", self.workdir, self.id, "/bin/sh", "-c", command]

    def kill_commands(self, run: str) -> None:
        """Kill the processes inside of the command run ``run`` (:meth:`exec_argv`): each whose
        environment holds its ``HERMES_TOOL_RUN``, read from ``/proc`` by a shell inside — what
        a timed-out or interrupted command left running, a double-forked one too, as on the host
        (:mod:`child.tools.terminal`).  The others stay: the job's stdio MCP servers run there
        too, and what an earlier command left running on purpose."""
        script = ('for d in /proc/[0-9]*; do case "$(cat "$d/environ" 2>/dev/null)" in '
                  f'*"{rlimits.TOOL_RUN_ENV}={run}"*) kill -KILL "${{d#/proc/}}" 2>/dev/null;; esac; done')
        self._quietly([*self.engine, "exec", self.id, "/bin/sh", "-c", script], session=False)

    def host_path(self, path: str) -> str:
        """``path`` as a file tool takes it: one under :attr:`mount_point` (the model sees the
        directory from inside) made relative to the working directory (:attr:`workdir` there);
        others unchanged."""
        if path == self.mount_point or path.startswith(self.mount_point.rstrip("/") + "/"):
            return os.path.relpath(path, self.workdir)
        return path

    def inside_path(self, path: str) -> str:
        """``path`` of the host as a process inside sees it: relative ones from :attr:`workdir`,
        one under the mounted directory (:attr:`top`) under :attr:`mount_point`; others unchanged."""
        if not os.path.isabs(path):
            return posixpath.normpath(posixpath.join(self.workdir, path))
        real = os.path.realpath(path)
        if real == self.top or real.startswith(self.top.rstrip("/") + "/"):
            return posixpath.normpath(posixpath.join(self.mount_point, os.path.relpath(real, self.top)))
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
def opened(desc: dict[str, Any] | None, cwd: str,
           worktree: dict[str, Any] | None = None) -> Iterator[Container | None]:
    """The job's container for the ``with`` block (None when the job has none): started
    on entry, removed on exit whatever happens.  ``worktree``: the job's (:class:`Container`).
    Raises :class:`ContainerError` on entry."""
    if not desc:
        yield None
        return
    box = Container(desc, cwd, worktree)
    box.start()
    try:
        yield box
    finally:
        box.remove()
