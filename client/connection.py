"""Talking to hermesd: request/reply on ``hermesd.sock``, events on ``events.sock``.

Every front end (``hermesctl``, ``hermes-batch``, ``hermesctl top``) goes
through this module; no business logic lives here, only transport, timeouts
and clear errors.

Losing nothing: :meth:`Connection.follow` subscribes first, then fetches the
backlog with ``events_since``, then de-duplicates by ``seq``; a gap in ``seq``
(a dropped packet, a daemon restart) is filled from the backlog again.

A dead daemon is known at once: its socket file may outlive it (``kill -9``),
so before the first request, and every :data:`LIVENESS_SECONDS` while a reply
is awaited, :func:`daemon_gone` looks for proof that nobody serves it (no
process listens on the socket, or the pid in ``hermesd.lock`` is gone) and the
call fails with ``daemon_not_running`` instead of waiting out its timeout; and the first
time a reply is slow, :func:`not_hermesd` looks at the peer: a socket whose peer is not
hermesd (it closes, or sends what is not ZMTP) fails with ``not_hermesd`` within a second.
Events the daemon's retention removed are not silently skipped: ``follow``
yields one :data:`GAP_EVENT` marker saying which seqs are gone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import zmq

from client.calls import (GAP_EVENT, RESTART_GRACE_SECONDS, Calls, ClientError, check_socket,  # noqa: F401
                          daemon_gone, gap_marker, lock_pid, not_hermesd, not_running, replaced, start_command,
                          too_large)
from hermesd import paths, protocol
from hermesd.protocol import ProtocolError


LIVENESS_SECONDS = 0.5
"""How often a call awaiting its reply checks that the daemon is still there."""

SPIN_SECONDS = 0.0003
"""How long :meth:`Connection.call` watches its socket for the reply before it sleeps
in ``poll`` (bounded busy-polling; bench/bench_control.py measures it).  A local reply mostly comes within this;
a thread woken from sleep costs more than the reply's own path on a small machine
(on 2 cores, p50 of a round trip 190 µs sleeping, 130 µs watching).  Watching is
``ZMQ_EVENTS``, which also takes in the commands libzmq's I/O thread posted
(zmq_getsockopt(3)), so the reply is seen without waking this thread."""

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


def _answered_soon(sock: zmq.Socket) -> bool:
    """True as soon as ``sock`` has a message to read, False when :data:`SPIN_SECONDS` pass first."""
    end = time.perf_counter() + SPIN_SECONDS
    while not sock.getsockopt(_EVENTS) & _POLLIN:
        if time.perf_counter() > end:
            return False
    return True


class Connection(Calls):
    """A connection to one daemon.

    ``runtime_dir``: socket directory (default from the environment: ``hermesd.paths.runtime_dir``);
    ``timeout``: seconds to wait for a reply before :class:`ClientError` (``timeout``).
    """

    def __init__(self, runtime_dir: str | Path | None = None, timeout: float = 10.0):
        self.sockets = paths.sockets(Path(runtime_dir) if runtime_dir else None)
        self.timeout = timeout
        self._ctx = zmq.Context.instance()
        self._req: zmq.Socket | None = None
        self._poller: zmq.Poller | None = None
        self._served_by: int | None = None
        self._probed = False  # whether the peer was looked at once a reply was slow (not_hermesd)

    def _socket(self) -> zmq.Socket:
        if self._req is None:
            check_socket(self.sockets.control)
            why = daemon_gone(self.sockets)
            if why:
                raise not_running(why, self.sockets)
            self._served_by = lock_pid(self.sockets.lock)  # the daemon this connection talks to
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"ipc://{self.sockets.control}")
            self._poller = zmq.Poller()
            self._poller.register(sock, zmq.POLLIN)
            self._req = sock
        return self._req

    def call(self, op: str, _timeout: float | None = None, **args: Any) -> Any:
        """Send ``op`` with ``args`` and return the result.

        ``_timeout`` (seconds) overrides the connection's reply timeout.
        Raises :class:`ProtocolError` (the daemon's error) or :class:`ClientError`
        (``daemon_not_running`` at once, also when the daemon dies while the reply is
        awaited, ``timeout``).
        """
        protocol.check_ints(args)  # a number msgpack or the daemon cannot hold: bad_request naming it
        sock = self._socket()
        req_id, frame = protocol.encode_request(op, args)
        if len(frame) > protocol.MAX_MESSAGE_BYTES:
            raise too_large(op, args, len(frame))
        sock.send(frame)
        wait = self.timeout if _timeout is None else _timeout
        deadline = time.monotonic() + wait
        answered = _answered_soon(sock)
        while True:
            if not answered:
                left = deadline - time.monotonic()
                if left > 0 and not self._poller.poll(int(min(left, LIVENESS_SECONDS) * 1000) + 1):
                    why = daemon_gone(self.sockets) or replaced(self.sockets, self._served_by)
                    if why is None and not self._probed:
                        self._probed = True
                        wrong = not_hermesd(self.sockets.control)
                        if wrong is not None:
                            self.close()
                            raise wrong
                    if why is None:
                        continue
                    self.close()
                    raise ClientError("daemon_not_running", f"hermesd stopped before it answered {op!r} ({why})",
                                      lost=True)
                if left <= 0:
                    self.close()  # a late reply must not be read as the answer to a later request
                    raise ClientError("timeout", f"hermesd did not answer {op!r} within {wait:g}s "
                                                 f"(socket {self.sockets.control})")
            answered = False
            reply = protocol.decode_reply(sock.recv())
            if reply.get("id") == req_id:
                return protocol.raise_for_reply(reply)

    def subscribe(self) -> zmq.Socket:
        """A SUB socket connected to ``events.sock``, subscribed to every event.

        Raises :class:`ClientError` (``daemon_not_running``) when no daemon serves it."""
        check_socket(self.sockets.events)
        why = daemon_gone(self.sockets)
        if why:
            raise not_running(why, self.sockets)
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.setsockopt(zmq.SUBSCRIBE, protocol.EVENT_TOPIC)
        sub.connect(f"ipc://{self.sockets.events}")
        return sub

    def follow(self, since: int = 0, *, follow: bool = True, idle: float = 1.0,
               stop_after: float | None = None,
               lost: Callable[[str | None], None] | None = None) -> Iterator[dict[str, Any]]:
        """Yield every event with ``seq > since`` in order, exactly once.

        Where the daemon's retention removed events after ``since`` (or after
        the last one yielded), one marker (:func:`gap_marker`, type
        :data:`GAP_EVENT`) comes first instead of them.  ``follow=False`` stops at the end of the backlog.  While following, an
        idle period of ``idle`` seconds triggers a backlog check, so events
        published while the SUB socket was reconnecting are not missed; a
        daemon restart is survived (errors while it is down are retried).
        ``stop_after`` (seconds) ends the iteration.  ``lost(reason)`` is told once when the
        daemon cannot be reached while following, and ``lost(None)`` once it answers again:
        also when it is gone before the subscription (between a follower's first request and
        this call), which is tried again every ``idle`` seconds.
        """
        sub = None
        last = since
        end = None if stop_after is None else time.monotonic() + stop_after
        away = False
        try:
            while True:
                try:
                    if follow and sub is None:
                        sub = self.subscribe()
                    for event in self._backlog(last):
                        last = event["seq"]
                        yield event
                    if away and lost:
                        lost(None)
                    away = False
                except (ClientError, ProtocolError) as err:
                    if not follow:
                        raise
                    if not away and lost:
                        lost(err.message)
                    away = True
                if not follow:
                    return
                while True:
                    if end is not None and time.monotonic() >= end:
                        return
                    if sub is None:  # not subscribed yet: the daemon is away
                        time.sleep(idle if end is None else max(0.0, min(idle, end - time.monotonic())))
                        break
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

    def close(self) -> None:
        """Close the request socket (a new one is made on the next call)."""
        if self._req is not None:
            self._req.close(linger=0)
            self._req = None
