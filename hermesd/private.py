"""Private files under any umask: everything hermesd creates under ``HERMES_HOME`` has its
final mode from its creation — directories 0700, files 0600 — whatever the umask it was started
with (``umask 000`` included).

* :func:`tighten_umask`: the daemon process runs under umask 077 from its first step, so every
  file and directory it, its threads and SQLite create is private from the first byte (the
  window pueue 4.0.5 closed: a state file created with the default mode, then ``chmod``-ed).
  The umask it was started with goes to its children in :data:`UMASK_ENV`: a job's tools write
  into the user's projects with the user's umask (:func:`restore_umask`).
* :func:`create_file`: a file created 0600 with ``os.open`` before anyone (SQLite) opens it.
* :func:`umask`: a tight umask around creations by code not ours (SQLite's ``-wal``, ``-shm``
  and ``-journal``), for callers that run outside the daemon process too.

A leaf (standard library only): children import :func:`restore_umask`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

UMASK_ENV = "HERMES_UMASK"
"""A child's environment variable: the umask (octal) the daemon was started with."""

PRIVATE_UMASK = 0o077
"""No permission for group or others."""


def tighten_umask() -> int:
    """Set this process's umask to :data:`PRIVATE_UMASK` and record the one it had in
    ``os.environ[UMASK_ENV]`` (children inherit it); returns the old umask."""
    old = os.umask(PRIVATE_UMASK)
    os.environ.setdefault(UMASK_ENV, f"{old:03o}")
    return old


def restore_umask() -> None:
    """In a child: take back the umask the daemon was started with (:data:`UMASK_ENV`; nothing
    without it or when it is not an octal number)."""
    try:
        os.umask(int(os.environ[UMASK_ENV], 8) & 0o777)
    except (KeyError, ValueError):
        pass


class umask:  # noqa: N801 - used as a function: ``with umask():``
    """``with umask(mask):`` runs the block under umask ``mask`` (process-wide), the old one
    restored after (a class, not ``contextlib``: clients import this module through
    :mod:`hermesd.paths`, and every import costs a ``hermesctl status``)."""

    def __init__(self, mask: int = PRIVATE_UMASK):
        self.mask, self.old = mask, None

    def __enter__(self) -> None:
        self.old = os.umask(self.mask)

    def __exit__(self, *_exc: object) -> None:
        os.umask(self.old)


def create_file(path: Path, mode: int = 0o600) -> None:
    """Create ``path`` with ``mode`` (an existing file of ours is set to ``mode``; symlinks are
    not followed).  Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def write_file(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace the contents of ``path`` by ``text``, the file created (or set to) ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
