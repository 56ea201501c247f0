"""A ZeroMQ socket served from the asyncio event loop, without pyzmq's asyncio layer.

``zmq.asyncio`` wraps every receive and send in a future, with poller
bookkeeping and enum flag arithmetic on each: most of the daemon's CPU for a
``status`` request went there (bench/bench_control.py).  Here the socket is a plain
``zmq.Socket``: the loop watches its ``ZMQ_FD`` (``loop.add_reader``) and
:meth:`Endpoint.drain` takes the messages waiting with non-blocking receives
while ``ZMQ_EVENTS`` says ``POLLIN``.  That descriptor is edge-triggered and
only says that the socket's state may have changed, so the socket is looked at
again after every send, and a drain that stops early (at most :data:`BATCH`
messages per turn of the loop, so one busy peer does not starve the others)
is continued with ``call_soon`` (libzmq, zmq_getsockopt(3), ``ZMQ_FD`` and
``ZMQ_EVENTS``).  Replies leave at once with ``NOBLOCK``: a ROUTER never
blocks on send (with ``ROUTER_MANDATORY`` off it drops what a peer that left,
or one over its high-water mark, cannot take), nor does a PUB.
"""

from __future__ import annotations

from typing import Any, Callable

import zmq

BATCH = 64
"""Messages taken from one socket per turn of the event loop."""
EVENTS, POLLIN, NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)
"""The constants as plain ints: pyzmq's are enums, and enum arithmetic costs as much as the
call it guards."""


class Endpoint:
    """``sock`` (a ROUTER) served on ``loop``: each message ``[envelope…, frame]`` goes to
    ``on_message(envelope, frame)``; :meth:`send` answers.  Messages with no envelope
    are dropped (nothing to answer to)."""

    def __init__(self, loop: Any, sock: zmq.Socket, on_message: Callable[[list[bytes], bytes], None]):
        self.loop, self.sock, self.on_message = loop, sock, on_message
        self.fd = sock.getsockopt(zmq.FD)
        self._again = False  # a drain is scheduled
        self._draining = False  # drain() runs: it looks at the socket again after each message
        loop.add_reader(self.fd, self.drain)
        self._soon()  # messages that arrived before the reader was added raise no edge

    def drain(self) -> None:
        """Hand over every message waiting, at most :data:`BATCH` now and the rest soon."""
        self._again = False
        self._draining = True
        try:
            self._take()
        except BaseException:
            self._soon()  # the messages after the one that raised are not left waiting for an edge
            raise
        finally:
            self._draining = False

    def _take(self) -> None:
        sock = self.sock
        for _ in range(BATCH):
            try:
                if not sock.getsockopt(EVENTS) & POLLIN:
                    return
                frames = sock.recv_multipart(NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:
                return  # closed at shutdown
            if len(frames) >= 2:
                self.on_message(frames[:-1], frames[-1])
        self._soon()

    def send(self, frames: list[bytes]) -> None:
        """Send ``frames`` now (a peer that is gone is skipped), then look at the socket again
        (a reply sent while :meth:`drain` runs: drain's own next look)."""
        try:
            self.sock.send_multipart(frames, NOBLOCK)
        except zmq.ZMQError:
            pass  # the peer is gone, or the socket closed at shutdown
        if not self._draining:
            self._soon()

    def _soon(self) -> None:
        if not self._again:
            self._again = True
            self.loop.call_soon(self.drain)

    def close(self) -> None:
        """Stop watching the socket and close it."""
        try:
            self.loop.remove_reader(self.fd)
        finally:
            self.sock.close(linger=0)
