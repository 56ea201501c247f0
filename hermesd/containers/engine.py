"""Containers for jobs' terminal commands: the daemon's side.

A job runs its terminal commands in a container when its spec asks for an
``image`` (a dataset line's ``docker_image``, ``delegate --image``, the
delegation tool's ``image``) or when ``terminal.backend`` is ``docker`` or
``podman`` (with ``terminal.image``).  At admission :func:`prepare` replaces
that ``image`` by a ``container`` entry of the spec (engine command line,
image, name, labels, options); the child reads it, starts the container when
the job starts, runs each command with ``exec`` and removes the container in a
``finally`` (:mod:`child.container`).  The daemon guarantees the removal:

* when a job ends, in any state, :func:`remove_for_job` removes the
  containers labelled with its id and this daemon's state directory;
* at start-up (after a ``kill -9``), :func:`sweep` removes every container
  labelled with this daemon's state directory whose job no longer runs — never
  a container of another daemon (another state directory).

These three steps are :class:`hermesd.containers.ops.ContainersPlugin`, a plugin
without a job kind whose hooks (``admit``, ``after_exit``, ``restore``) see every
job, whatever its kind, and import this module only for a job that has a
container, or a daemon that may have started one (``Plugin.on_demand``).

Labels (docker/podman ``--label``): ``hermes.job=<job id>`` and
``hermes.state_dir=<absolute state directory>``.

The engine is the docker or podman command line.  The event loop never waits
for it: each call runs in a worker thread with a timeout
(:data:`ENGINE_TIMEOUT_SECONDS`).  A thread rather than an asyncio subprocess:
hermesd is a child subreaper and reaps with ``waitpid(-1)``, which may take
an engine command's exit status first; what counts here is its output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import zlib
from typing import Any

from hermesd.system import limits
from hermesd.config import Config
from hermesd.containers.config import Terminal
from hermesd.contract.states import ACTIVE
from hermesd.jobs import JobTable
from hermesd.protocol import ProtocolError

log = logging.getLogger("hermesd")

LABEL_JOB = "hermes.job"
LABEL_STATE_DIR = "hermes.state_dir"
WORKDIR = "/workspace"
"""Where the job's working directory is bind-mounted inside its container (for a job with a git
worktree, the worktree's top level, beside the repository's git directory: :mod:`child.container`)."""

ENGINE_TIMEOUT_SECONDS = 60.0
"""Longest wait for one engine command of the daemon (``ps``, ``inspect``, ``rm``)."""

INSTALL_HINT = ("install podman (Debian/Ubuntu: apt-get install podman runc) or docker, "
                "or set terminal.engine_path in config.yaml")

_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
"""An image reference (``name[:tag][@digest]``): never an engine option (no leading ``-``)."""


class EngineError(Exception):
    """An engine command failed, timed out, or no engine is installed (the message says which)."""


def check_image(image: Any) -> str:
    """``image`` if it is a plausible image reference; raises :class:`ValueError` saying why not."""
    if not isinstance(image, str) or not _IMAGE.fullmatch(image):
        raise ValueError(f"{image!r} is not an image reference (name[:tag], letters, digits and ._/:@+-)")
    return image


def find_engine(terminal: Terminal) -> tuple[list[str], str]:
    """The engine command line and its kind for ``terminal`` (the config section):
    ``(["/usr/bin/podman", "--runtime", "runc"], "podman")``.

    ``terminal.engine_path`` when set, else ``terminal.backend`` on ``PATH``,
    else (backend ``local``) ``podman`` then ``docker``.  Raises
    :class:`EngineError` naming what was looked for and what to install.
    """
    names = [terminal.engine_path] if terminal.engine_path else (
        [terminal.backend] if terminal.backend != "local" else ["podman", "docker"])
    import shutil  # here: shutil imports bz2 and lzma, a megabyte of the idle daemon (bench/README.md)

    path = next((found for found in map(shutil.which, names) if found), None)
    if path is None:
        raise EngineError(f"no container engine found ({' or '.join(names)} is not installed or not "
                          f"executable); {INSTALL_HINT}")
    kind = terminal.backend if terminal.backend != "local" else (
        "podman" if "podman" in os.path.basename(path) else "docker")
    argv = [path]
    if terminal.runtime and kind == "podman":
        argv += ["--runtime", terminal.runtime]  # podman takes it globally; docker per run (child.container)
    return argv, kind


def container_name(job_id: str, state_dir: str) -> str:
    """``hermes-<job id>-<8 hex of the state directory>``: unique per daemon and job.  The hex is a
    CRC-32 (zlib), not a digest: ``hashlib`` would map OpenSSL into the daemon
    (tests/test_daemon_footprint.py), and the labels, not the name, say whose a container is."""
    return f"hermes-{job_id}-{zlib.crc32(state_dir.encode()):08x}"


def prepare(config: Config, job_id: str, fields: dict[str, Any]) -> None:
    """At admission: turn the ``image`` of ``fields["spec"]`` (or the config's default
    container) into the spec's ``container`` entry; nothing for a job on the host.

    The entry: ``engine`` (argv prefix), ``kind`` (``docker``/``podman``),
    ``image``, ``name``, ``labels``, ``workdir``, ``network`` (bool), ``pull``
    (bool), ``runtime``, ``max_processes``, ``start_timeout_seconds``, ``memory_mb`` (the
    job's memory limit, MiB or None: the container's ``--memory``, see :func:`hermesd.system.limits.for_child`).
    Raises ``ProtocolError(bad_request)`` naming the job for a bad image or no
    engine installed.
    """
    t = config.terminal
    spec = dict(fields.get("spec") or {})
    image = spec.pop("image", None) or (t.image if t.backend != "local" else None)  # the config checks it is set
    if image is None:
        return
    try:
        check_image(image)
        engine, kind = find_engine(t)
    except (ValueError, EngineError) as exc:
        raise ProtocolError("bad_request", f"job {job_id}: image {image!r}: {exc}",
                            {"field": "image", "job": job_id}) from None
    state_dir = str(config.state_dir().resolve())
    memory_mb = limits.effective(limits.ceiling(config.child_limits), spec.get("resources")).memory_mb
    spec["container"] = {
        "engine": engine, "kind": kind, "image": image, "name": container_name(job_id, state_dir),
        "labels": {LABEL_JOB: job_id, LABEL_STATE_DIR: state_dir}, "workdir": WORKDIR,
        "network": t.network, "pull": t.pull, "runtime": t.runtime, "max_processes": t.max_processes,
        "start_timeout_seconds": t.start_timeout_seconds, "memory_mb": memory_mb,
    }
    fields["spec"] = spec


# engine commands (blocking: worker threads only) ---------------------------------------------

def _run(argv: list[str]) -> str:
    """Run one engine command; its stdout.  Raises :class:`EngineError` with its stderr."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=ENGINE_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{' '.join(argv[:3])}… did not answer within {ENGINE_TIMEOUT_SECONDS:g}s") from None
    except OSError as exc:
        raise EngineError(f"cannot run {argv[0]}: {exc}") from None
    if done.returncode != 0 and done.stderr.strip():  # 0 may be a status reaped by hermesd: see the module doc
        raise EngineError(done.stderr.strip()[-500:])
    return done.stdout


def labelled(engine: list[str], labels: dict[str, str]) -> dict[str, str]:
    """``{container id: its hermes.job label}`` of every container (running or not) with all ``labels``."""
    filters = [arg for key, value in labels.items() for arg in ("--filter", f"label={key}={value}")]
    ids = _run([*engine, "ps", "-aq", "--no-trunc", *filters]).split()
    if not ids:
        return {}
    out = _run([*engine, "inspect", "--format", f'{{{{.Id}}}} {{{{index .Config.Labels "{LABEL_JOB}"}}}}', *ids])
    found = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return {cid: found.get(cid, "") for cid in ids}


def remove(engine: list[str], ids: list[str]) -> None:
    """Remove containers ``ids`` at once, running or not (``rm -f``: SIGKILL, no grace)."""
    if ids:
        _run([*engine, "rm", "-f", *ids])


def remove_labelled(engine: list[str], labels: dict[str, str]) -> list[str]:
    """Remove every container with all ``labels``; returns their ids."""
    ids = list(labelled(engine, labels))
    remove(engine, ids)
    return ids


# the daemon's guarantees (on the event loop) ---------------------------------------------------

def remove_for_job(loop: asyncio.AbstractEventLoop, row: dict[str, Any] | None) -> asyncio.Future | None:
    """A job ended (any state): remove its containers in a worker thread.  Returns the
    future (None for a job without a container); failures are logged, never raised."""
    container = ((row or {}).get("spec") or {}).get("container")
    if not container:
        return None
    job_id = row["id"]

    def logged(future: asyncio.Future) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            log.warning("could not remove the container of job %s: %s", job_id, exc)
        elif future.result():
            log.info("removed the container(s) of job %s: %s", job_id, " ".join(i[:12] for i in future.result()))

    future = loop.run_in_executor(None, remove_labelled, container["engine"], container["labels"])
    future.add_done_callback(logged)
    return future


def engines_used(jobs: JobTable, config: Config) -> list[list[str]]:
    """The engine command lines this daemon may have started containers with: those of
    its jobs' specs, and the configured one when ``terminal.backend`` is not ``local``."""
    rows = jobs.store.all("SELECT DISTINCT json_extract(spec, '$.container.engine') AS engine FROM jobs "
                          "WHERE json_extract(spec, '$.container.engine') IS NOT NULL")
    engines = [json.loads(row["engine"]) for row in rows]  # json_extract gives an array as JSON text
    if config.terminal.backend != "local":
        try:
            engines.append(find_engine(config.terminal)[0])
        except EngineError:
            pass
    unique: list[list[str]] = []
    for engine in engines:
        if engine not in unique:
            unique.append(engine)
    return unique


async def sweep(loop: asyncio.AbstractEventLoop, jobs: JobTable, config: Config) -> list[str]:
    """At start-up: remove every container labelled with this daemon's state directory
    whose job is not ``starting``/``running`` (left by a daemon killed with ``-9``).
    Returns the removed ids; an engine that fails is logged and skipped."""
    state_dir = str(config.state_dir().resolve())
    removed: list[str] = []
    for engine in engines_used(jobs, config):
        try:
            found = await loop.run_in_executor(None, labelled, engine, {LABEL_STATE_DIR: state_dir})
            stale = [cid for cid, job in found.items()
                     if (jobs.get(job) or {}).get("status") not in ACTIVE]  # decided on the loop, now
            await loop.run_in_executor(None, remove, engine, stale)
        except EngineError as exc:
            log.warning("container sweep with %s failed: %s", engine[0], exc)
            continue
        removed += stale
    if removed:
        log.warning("removed %d container(s) left by an earlier hermesd: %s", len(removed),
                    " ".join(i[:12] for i in removed))
    return removed
