"""Talking to hermesd: request/reply on ``hermesd.sock``, events on ``events.sock``.

Every front end (``hermesctl``, ``hermes-batch``, ``hermesctl top``) goes
through this module; no business logic lives here, only transport, timeouts
and clear errors.

Losing nothing: :meth:`Connection.follow` subscribes first, then fetches the
backlog with ``events_since``, then de-duplicates by ``seq``; a gap in ``seq``
(a dropped packet, a daemon restart) is filled from the backlog again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator

import zmq

from hermesd import paths, protocol
from hermesd.protocol import ProtocolError


class ClientError(Exception):
    """A client-side failure with a protocol-style ``code`` (``daemon_not_running``, ``timeout``)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _check_socket(path: Path) -> None:
    if not path.exists():
        raise ClientError("daemon_not_running",
                          f"hermesd is not running (no socket at {path}); start it with `hermesd run`")
    st = path.stat()
    if st.st_uid != os.getuid() or not os.access(path, os.R_OK | os.W_OK):
        raise ClientError("daemon_not_running",
                          f"the socket {path} is not yours (owner uid {st.st_uid}); set HERMES_RUNTIME_DIR "
                          "to your own daemon's runtime directory")


class Connection:
    """A connection to one daemon.

    ``runtime_dir``: socket directory (default from the environment, SPEC §2);
    ``timeout``: seconds to wait for a reply before :class:`ClientError` (``timeout``).
    """

    def __init__(self, runtime_dir: str | Path | None = None, timeout: float = 10.0):
        self.sockets = paths.sockets(Path(runtime_dir) if runtime_dir else None)
        self.timeout = timeout
        self._ctx = zmq.Context.instance()
        self._req: zmq.Socket | None = None

    def _socket(self) -> zmq.Socket:
        if self._req is None:
            _check_socket(self.sockets.control)
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"ipc://{self.sockets.control}")
            self._req = sock
        return self._req

    def call(self, op: str, _timeout: float | None = None, **args: Any) -> Any:
        """Send ``op`` with ``args`` and return the result.

        ``_timeout`` (seconds) overrides the connection's reply timeout.
        Raises :class:`ProtocolError` (the daemon's error) or :class:`ClientError`
        (``daemon_not_running``, ``timeout``).
        """
        sock = self._socket()
        req_id, frame = protocol.encode_request(op, args)
        sock.send(frame)
        wait = self.timeout if _timeout is None else _timeout
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                self.close()  # a late reply must not be read as the answer to a later request
                if not self.sockets.control.exists():
                    raise ClientError("daemon_not_running", "hermesd stopped before it answered")
                raise ClientError("timeout", f"hermesd did not answer {op!r} within {wait:g}s "
                                             f"(socket {self.sockets.control})")
            reply = protocol.decode_reply(sock.recv())
            if reply.get("id") == req_id:
                return protocol.raise_for_reply(reply)

    def subscribe(self) -> zmq.Socket:
        """A SUB socket connected to ``events.sock``, subscribed to every event."""
        _check_socket(self.sockets.events)
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.setsockopt(zmq.SUBSCRIBE, protocol.EVENT_TOPIC)
        sub.connect(f"ipc://{self.sockets.events}")
        return sub

    def follow(self, since: int = 0, *, follow: bool = True, idle: float = 1.0,
               stop_after: float | None = None) -> Iterator[dict[str, Any]]:
        """Yield every event with ``seq > since`` in order, exactly once.

        ``follow=False`` stops at the end of the backlog.  While following, an
        idle period of ``idle`` seconds triggers a backlog check, so events
        published while the SUB socket was reconnecting are not missed; a
        daemon restart is survived (errors while it is down are retried).
        ``stop_after`` (seconds) ends the iteration.
        """
        sub = self.subscribe() if follow else None
        last = since
        end = None if stop_after is None else time.monotonic() + stop_after
        try:
            while True:
                try:
                    for event in self._backlog(last):
                        last = event["seq"]
                        yield event
                except (ClientError, ProtocolError):
                    if not follow:
                        raise
                if not follow:
                    return
                while True:
                    if end is not None and time.monotonic() >= end:
                        return
                    if not sub.poll(int(idle * 1000)):
                        break  # idle: look at the backlog in case something was missed
                    _topic, payload = sub.recv_multipart()
                    event = protocol.unpackb(payload)
                    seq = event.get("seq", 0)
                    if seq <= last:
                        continue
                    if seq != last + 1:
                        break  # a gap: fill it from the backlog
                    last = seq
                    yield event
        finally:
            if sub is not None:
                sub.close()

    def _backlog(self, since: int) -> Iterator[dict[str, Any]]:
        while True:
            page = self.call("events_since", since=since, limit=1000)
            for event in page["events"]:
                since = event["seq"]
                yield event
            if len(page["events"]) < 1000 and not page.get("more"):
                return

    def close(self) -> None:
        """Close the request socket (a new one is made on the next call)."""
        if self._req is not None:
            self._req.close(linger=0)
            self._req = None
