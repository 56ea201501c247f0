"""The Ray driver's relay: batch items on the cluster report to hermesd through their driver.

An item on a worker node cannot reach ``children.sock`` (hermesd's socket is a file on
the driver's machine).  The driver (:mod:`child.ray_driver`) binds a ZeroMQ ROUTER on its
node's address (``tcp://HOST:PORT``, a free port) and hands each item it starts that
address, the item's handle and a token of its own (a file in the item's scratch directory,
never its environment).  The item's channel (:class:`child.item.FileChannel`) sends the
few child ops it may send (:data:`RELAYED`: its progress, and its model calls' grants) to
the relay as it would to hermesd (:class:`child.channel.Channel`, the handle as its job);
the relay checks the handle's token and forwards each message to hermesd as
``child.batch_relay {item, op, args}`` from the driver's own job, and each reply back to
the item that asked, under its own request id.  A message of an unknown item or with a
wrong token is answered ``not_found``; another op ``bad_request``.

It runs in a thread of its own with its own connection to hermesd (ZeroMQ sockets are not
shared between threads), so a grant is relayed at once, whatever the driver's main loop
is waiting for.
"""

from __future__ import annotations

import hmac
import os
import threading
from typing import Any

import zmq

from hermesd import protocol

RELAYED = ("child.progress", "child.grant", "child.grant_done")
"""The child ops an item may send through the relay (the daemon checks them again)."""

POLL_MS = 500
ROUTES_MOST = 100_000
"""Requests whose reply is awaited, at most (a daemon that stopped answering: the oldest go)."""


class Relay:
    """The relay of one driver: ``socket_path`` (``children.sock``), the driver's ``job`` and
    ``token``, ``host`` (the address items on other nodes reach this machine at).

    :attr:`address` is the endpoint items connect to; :meth:`admit` / :meth:`forget` an
    item's handle and token (from the driver's main thread); :meth:`close` stops it."""

    def __init__(self, socket_path: str, job: str, token: str, host: str):
        self.job, self.token = job, token
        self.items: dict[str, str] = {}  # handle -> its token (plain dict operations: atomic under the GIL)
        self.ctx = zmq.Context()
        self.front = self.ctx.socket(zmq.ROUTER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.front.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE_BYTES)
        self.front.bind(f"tcp://{'[' + host + ']' if ':' in host else host}:0")
        self.address = self.front.getsockopt_string(zmq.LAST_ENDPOINT)
        self.back = self.ctx.socket(zmq.DEALER)
        self.back.setsockopt(zmq.LINGER, 1000)
        self.back.connect(f"ipc://{socket_path}")
        self._routes: dict[str, tuple[bytes, Any]] = {}  # relayed id -> (item's identity, its own id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="hermes-relay", daemon=True)
        self._thread.start()

    def admit(self, handle: str) -> dict[str, str]:
        """A new item: returns what it needs to reach the relay (``address``, ``item``, ``token``)."""
        token = self.items[handle] = os.urandom(16).hex()
        return {"address": self.address, "item": handle, "token": token}

    def forget(self, handle: str) -> None:
        """The item ended (or was cancelled): its messages are refused from now on."""
        self.items.pop(handle, None)

    def close(self) -> None:
        """Stop the thread and close both sockets."""
        self._stop.set()
        self._thread.join(5.0)
        self.front.close()
        self.back.close()
        self.ctx.term()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        poller.register(self.back, zmq.POLLIN)
        while not self._stop.is_set():
            for sock, _ in poller.poll(POLL_MS):
                if sock is self.front:
                    self._from_item(*self.front.recv_multipart()[:2])
                else:
                    self._from_daemon(self.back.recv())

    def _from_item(self, identity: bytes, frame: bytes) -> None:
        try:
            request = protocol.decode_request(frame)
        except protocol.ProtocolError as err:
            self.front.send_multipart([identity, protocol.encode_error(getattr(err, "req_id", None), err)])
            return
        args = dict(request.args)
        handle, token = args.pop("job", None), args.pop("token", None)
        known = self.items.get(handle) if isinstance(handle, str) else None
        if known is None or not isinstance(token, str) or not hmac.compare_digest(known, token):
            refused = protocol.ProtocolError("not_found", "unknown item or wrong token")
        elif request.op not in RELAYED:
            refused = protocol.ProtocolError("bad_request", f"{request.op} is not available to a batch item on a Ray "
                                             "cluster", {"op": request.op})
        else:
            refused = None
        if refused is not None:
            self.front.send_multipart([identity, protocol.encode_error(request.id, refused)])
            return
        if len(self._routes) >= ROUTES_MOST:
            self._routes.pop(next(iter(self._routes)))
        relay_id = f"{handle}/{request.id}"  # two items' ids may be alike (a pid and a counter)
        self._routes[relay_id] = (identity, request.id)
        _, wrapped = protocol.encode_request("child.batch_relay", {
            "job": self.job, "token": self.token, "item": handle, "op": request.op, "args": args}, relay_id)
        self.back.send(wrapped)

    def _from_daemon(self, frame: bytes) -> None:
        try:
            reply = protocol.decode_reply(frame)
        except protocol.ProtocolError:
            return
        route = self._routes.pop(reply["id"], None) if isinstance(reply["id"], str) else None
        if route is not None:
            identity, reply["id"] = route
            self.front.send_multipart([identity, protocol.packb(reply)])
