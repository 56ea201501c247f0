"""The child's side of ``children.sock``: a DEALER socket speaking the protocol envelope.

Not thread-safe: only the child's main thread uses it.
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from child import redact
from hermesd import protocol


_preconnected: dict[str, tuple[zmq.Context, zmq.Socket]] = {}


def _connect(path: str) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE_BYTES)
    sock.connect(path if "://" in path else f"ipc://{path}")  # a batch item on Ray: its driver's tcp:// relay
    return ctx, sock


def preconnect(path: str) -> None:
    """Open the connection to ``children.sock`` at ``path`` before there is a job.

    A warm-start spare (:mod:`child.spare`) calls this while it waits, so the
    context's I/O thread and the ZMTP handshake with the daemon are done before
    the job's first message; the next :class:`Channel` to the same path takes
    this connection over.  The connection carries nothing until then (the
    daemon knows a job by its id and token, not by its connection).
    """
    if path not in _preconnected:
        _preconnected[path] = _connect(path)


class ChannelError(Exception):
    """The daemon did not answer in time, or answered with an error."""


class Channel:
    """Request/reply to the daemon on behalf of one job.

    ``path``: filesystem path of ``children.sock`` (or a ZeroMQ endpoint such as
    ``tcp://host:port``: the relay of an item's Ray driver, :mod:`child.relay`); ``job``: the job id;
    ``token``: the per-job secret the daemon handed over in the environment.
    """

    def __init__(self, path: str, job: str, token: str):
        self.job = job
        self.token = token
        self._ctx, self._sock = _preconnected.pop(path, None) or _connect(path)

    def _args(self, args: dict[str, Any]) -> dict[str, Any]:
        """The envelope's arguments: the job, its token, and ``args`` with every known secret
        redacted (:mod:`child.redact`: nothing the daemon stores or publishes holds one)."""
        return {"job": self.job, "token": self.token, **redact.current().data(args)}

    def notify(self, op: str, /, **args: Any) -> None:
        """Send a request whose reply nobody waits for (progress reports)."""
        _, frame = protocol.encode_request(op, self._args(args))
        self._sock.send(frame)

    def call(self, op: str, /, timeout: float | None = 30.0, **args: Any) -> Any:
        """Send a request and return its result.

        ``timeout`` in seconds (``None`` waits for ever).  Replies to earlier
        notifications are skipped.  Raises :class:`ChannelError` on timeout and
        :class:`hermesd.protocol.ProtocolError` when the daemon answers an error.
        """
        req_id, frame = protocol.encode_request(op, self._args(args))
        self._sock.send(frame)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_ms = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if not self._sock.poll(wait_ms if wait_ms >= 0 else None):
                if deadline is not None and time.monotonic() >= deadline:
                    raise ChannelError(f"no reply from hermesd to {op} within {timeout}s")
                continue
            reply = protocol.decode_reply(self._sock.recv())
            if reply.get("id") == req_id:
                return protocol.raise_for_reply(reply)

    def close(self) -> None:
        """Flush pending messages (up to the linger time) and close."""
        self._sock.close()
        self._ctx.term()
