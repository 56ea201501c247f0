"""Where hermesd keeps things, and binding its sockets with safe permissions.

* ``HERMES_HOME`` (default ``~/.hermes``): ``config.yaml``, ``state.db``,
  ``profiles/NAME/``, ``jobs/ID/`` (each job's log and scratch space).
* Runtime directory: ``$HERMES_RUNTIME_DIR``, else
  ``$XDG_RUNTIME_DIR/hermes``, else ``$HERMES_HOME/run``; mode 0700, holding
  ``hermesd.sock`` (requests), ``events.sock`` (events), ``children.sock``
  (child processes), all 0600, and ``hermesd.lock``.

Clients and children import this module to find the sockets.
"""

from __future__ import annotations

import os
import stat
from collections import namedtuple
from pathlib import Path

from hermesd.private import umask


def hermes_home() -> Path:
    """Return ``$HERMES_HOME`` or ``~/.hermes`` (not created)."""
    env = os.environ.get("HERMES_HOME")
    return Path(env).expanduser() if env else Path.home() / ".hermes"


def runtime_dir() -> Path:
    """Return the runtime directory (not created)."""
    env = os.environ.get("HERMES_RUNTIME_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "hermes"
    return hermes_home() / "run"


class Sockets(namedtuple("Sockets", "dir")):
    """Paths of the three sockets and the lock file inside one runtime directory ``dir`` (a
    :class:`pathlib.Path`); a named tuple of :mod:`collections`: ``dataclasses`` or
    ``typing.NamedTuple`` would cost a client's start their import."""

    __slots__ = ()

    @property
    def control(self) -> Path:
        """``hermesd.sock``: ROUTER for client requests."""
        return self.dir / "hermesd.sock"

    @property
    def events(self) -> Path:
        """``events.sock``: PUB for events."""
        return self.dir / "events.sock"

    @property
    def children(self) -> Path:
        """``children.sock``: ROUTER for child processes."""
        return self.dir / "children.sock"

    @property
    def lock(self) -> Path:
        """``hermesd.lock``: held (flock) by the running daemon; holds its pid."""
        return self.dir / "hermesd.lock"


def sockets(directory: Path | None = None) -> Sockets:
    """Return the socket paths in ``directory`` (default :func:`runtime_dir`)."""
    return Sockets(Path(directory) if directory else runtime_dir())


SOCKET_PATH_MAX = 107
"""Longest Unix socket path in bytes: ``sizeof(sockaddr_un.sun_path)`` (108 on Linux, unix(7)) less the NUL."""


class UnsafeDirectory(Exception):
    """The runtime directory exists but is not ours, or is open to others."""


class SocketPathTooLong(Exception):
    """A socket path in the runtime directory is longer than :data:`SOCKET_PATH_MAX` bytes."""


def check_socket_paths(sockets: Sockets) -> None:
    """Raise :class:`SocketPathTooLong` naming the longest socket path of ``sockets``, its
    length and the limit, when it does not fit in ``sockaddr_un`` (checked before anything
    is created, so the error says what to change)."""
    longest = max((sockets.control, sockets.events, sockets.children), key=lambda p: len(os.fsencode(p)))
    size = len(os.fsencode(longest))
    if size > SOCKET_PATH_MAX:
        raise SocketPathTooLong(
            f"socket path {longest} is {size} bytes, longer than the Unix limit of {SOCKET_PATH_MAX} bytes; "
            "set HERMES_RUNTIME_DIR (or XDG_RUNTIME_DIR / HERMES_HOME) to a shorter directory")


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700, or check an existing one.

    Raises :class:`UnsafeDirectory` when it belongs to another user or is a
    symlink; tightens the mode to 0700 when it is ours but looser.
    """
    with umask(0o077):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def bind_ipc(sock, path: Path) -> None:
    """Bind a zmq socket to ``ipc://path`` with the socket file created 0600.

    The umask is tightened around ``bind`` so the file is never visible with
    looser permissions, then the mode is checked and set explicitly.
    """
    with umask(0o177):
        sock.bind(f"ipc://{path}")
    os.chmod(path, 0o600)


PLUGIN_ROOTS = ("hermesd", "batch")
"""Where the job types' and plugins' packages are (``hermesd/<type>/``, and ``batch/`` itself)."""


def plugin_modules(name: str) -> list[str]:
    """The dotted names of the modules called ``name`` of the plugins' packages (``batch.NAME``,
    ``hermesd.<package>.NAME``; :data:`PLUGIN_ROOTS`), in name order: a job type's part found by
    file, without importing its package (``config``: its part of ``config.yaml``,
    :mod:`hermesd.config`; ``display``: how its events read in a client, :mod:`client.render`)."""
    from importlib.util import find_spec

    names = []
    for root in PLUGIN_ROOTS:
        spec = find_spec(root)
        if spec is None or not spec.submodule_search_locations:
            continue
        for folder in map(Path, spec.submodule_search_locations):
            if (folder / f"{name}.py").is_file():
                names.append(f"{root}.{name}")
            names += [f"{root}.{p.parent.name}.{name}" for p in sorted(folder.glob(f"*/{name}.py"))
                      if (p.parent / "__init__.py").is_file()]
    return names
