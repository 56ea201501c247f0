"""The containers plugin's part of ``config.yaml``: ``terminal:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermesd.config import ENV_NAMES, at_least, one_of, section

TERMINAL_BACKENDS = ("local", "docker", "podman")


@dataclass(frozen=True)
class Terminal:
    """``terminal:`` — where a job's terminal commands run (see ``hermesd.containers.ops``).

    ``backend``: ``local`` (on the host) or a container engine for every job
    (``docker``/``podman``, with ``image``); a job may still ask for an image
    itself (a dataset's ``docker_image``, ``delegate --image``).  ``engine_path``:
    the engine's command (default: ``backend`` on ``PATH``; for ``local``,
    ``podman`` then ``docker``).  ``runtime``: the OCI runtime the engine uses
    (``--runtime``, e.g. ``runc``).  ``network``: give containers the engine's
    default network (default: none).  ``pull``: pull a missing image (default:
    never; the job fails).  ``max_processes``: the containers' ``nproc`` limit
    (at most the job's own).  ``start_timeout_seconds``: how long starting a
    container may take.  ``pass_env``: the secrets of the daemon's environment every job's
    commands get all the same (names; their values are still redacted: :mod:`hermesd.redaction`).
    """

    backend: str = field(default="local", metadata=one_of(*TERMINAL_BACKENDS))
    image: str | None = None
    engine_path: str | None = None
    runtime: str | None = None
    network: bool = False
    pull: bool = False
    max_processes: int = field(default=4096, metadata=at_least(1))
    start_timeout_seconds: float = field(default=60.0, metadata=at_least(1))
    pass_env: list[str] = field(default_factory=list, metadata=ENV_NAMES)


@dataclass(frozen=True)
class Sections:
    """The containers plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    terminal: Terminal = section(Terminal)

    def check(self: Any) -> list[tuple[str, str]]:
        """A container engine for every job needs the image it runs them in."""
        if self.terminal.backend != "local" and not self.terminal.image:
            return [("terminal.backend", f"{self.terminal.backend} runs every job's commands in a container, so "
                     "terminal.image must name its image")]
        return []
