"""The warm-start wire: daemon ⇄ zygote messages, the job a spare receives, shared names.

A leaf module (standard library and msgpack only): the daemon
(:mod:`hermesd.warm.client`) and the child side (:mod:`child.zygote`,
:mod:`child.spare`) both import it, so each format is defined once.

Daemon ⇄ zygote: a private ``SOCK_SEQPACKET`` socketpair, one msgpack map per
packet (:func:`send_msg`, :func:`recv_msg`).  The zygote first sends
``{"ready": true, "pid", "seconds", "failed"}``, then ``{"spare": pid}`` with the
write end of that spare's request pipe as ``SCM_RIGHTS`` for each spare it
forks, or ``{"errno", "error"}`` when a fork failed; the daemon asks for more
with ``{"fork": n, "held": n}`` (``held``: spares it still holds; 0 asks for a
fork at once), and for a provider's SDK in the spares to come with
``{"preload": provider}`` (a job used a provider the zygote had not imported).
The zygote's environment names the providers of the daemon's config in
:data:`PROVIDERS_ENV`, and its ``base_url`` in :data:`BASE_URL_ENV`.

Daemon → spare: the job, ``{"cwd", "env", "log_path", "zygote"}``, as one
length-prefixed (4 bytes, network order) msgpack map on the spare's pipe
(:func:`write_request`, :func:`read_request`).
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

import msgpack

SPARES = 2
"""Children the zygote keeps forked ahead of time (the daemon holds them), so that a
request costs no fork.  The zygote forks this many once it is warm."""
MARK_ENV = "HERMES_ZYGOTE"
"""Set in a warm child's environment: the pid of the zygote that forked it."""
ROOM_ENV = "HERMES_ENV_ROOM"
"""A padding variable in the zygote's environment: the room a forked child writes its
own environment into, as ``/proc/PID/environ`` shows it (see :mod:`child.spare`)."""
ENV_ROOM_BYTES = 64 * 1024
"""Size of that room (one variable may hold 128 KiB)."""
OWNER_ENV = "HERMES_ZYGOTE_OF"
"""The zygote's environment names the daemon's ``supervisor_id`` here, not in
``HERMES_SUPERVISOR``: it is no job's process (it dies with the daemon)."""
PROVIDERS_ENV = "HERMES_ZYGOTE_PROVIDERS"
"""The providers the daemon's config names (comma-separated; empty: none, the default applies):
the zygote imports their SDKs, and only theirs (:func:`child.zygote.preload_for`)."""
BASE_URL_ENV = "HERMES_ZYGOTE_BASE_URL"
"""The config's ``base_url``, which the default provider depends on."""
TITLE_ROOM = 256
"""Bytes of padding on the zygote's command line: a forked child's title (``hermes-child
<id> <kind> <goal>``) is written over the command line it inherits (``SPT_NOENV=1``
keeps setproctitle out of the environment area), so that line must be long enough."""
MAX_PACKET = 64 * 1024
"""Largest daemon ⇄ zygote message, bytes."""

_HEADER = struct.Struct("!I")


def send_msg(sock: socket.socket, obj: Any, fds: tuple[int, ...] = ()) -> None:
    """Send ``obj`` as one msgpack packet, with ``fds`` as ``SCM_RIGHTS``.

    Raises ``OSError`` (``BlockingIOError`` on a full non-blocking socket,
    ``BrokenPipeError``/``ConnectionError`` when the peer is gone).
    """
    data = msgpack.packb(obj, use_bin_type=True)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv_msg(sock: socket.socket) -> tuple[Any, list[int]] | None:
    """Receive one packet: ``(message, fds)``; ``None`` at end of stream.

    Raises ``ValueError`` for a packet or descriptor list that was cut short,
    ``msgpack.UnpackException`` for one that is not msgpack, ``OSError``
    (``BlockingIOError`` when a non-blocking socket has nothing).
    """
    data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET, 4)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or not data:
        for fd in fds:
            os.close(fd)
        if data:
            raise ValueError("a zygote message was cut short")
        return None
    return msgpack.unpackb(data, raw=False), fds


def write_request(fd: int, request: dict[str, Any]) -> bool:
    """Write ``request`` (length-prefixed msgpack) to a spare's pipe ``fd`` and close it.

    False when the spare is gone (its end of the pipe is closed).
    """
    try:
        data = msgpack.packb(request, use_bin_type=True)
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(fd, view):]
        return True
    except OSError:  # BrokenPipeError: a dead spare
        return False
    finally:
        os.close(fd)


def read_request(fd: int) -> dict[str, Any] | None:
    """A spare's job from its pipe ``fd`` (``None`` at end of stream: the daemon let it go)."""
    data = b""
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack(data[:_HEADER.size])[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
    return msgpack.unpackb(data[_HEADER.size:], raw=False)
