"""One request to hermesd without pyzmq: a ZMTP 3.0 DEALER on the control socket's unix stream.

``import zmq`` alone costs more than a whole ``hermesctl status`` may (issue
22), so the fast path of :mod:`client.fast` speaks the wire itself, as far as
one request needs: the 64-byte greeting with the ``NULL`` mechanism, the
``READY`` command naming the socket type ``DEALER``, one message frame out,
frames in until a whole message (commands skipped).  The rules are those of
ZMTP 3.0, https://rfc.zeromq.org/spec/23/ (greeting §"Greeting", framing
§"Framing", ``NULL`` mechanism and its ``READY`` metadata §"The NULL Security
Mechanism"); libzmq's ROUTER accepts a 3.0 peer.  The daemon's ROUTER strips
the peer's routing id on the way in and adds it back on the way out, so the
message is the protocol's single frame both ways.  Everything else (events,
retries, timeouts with clear errors) is :class:`client.connection.Connection`'s,
over pyzmq.
"""

from __future__ import annotations

import _socket  # the C module: ``socket.py`` builds enums of every constant at import, this needs none
import struct

MORE, LONG, COMMAND = 0x01, 0x02, 0x04
"""Flag bits of a ZMTP frame's first octet."""
GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + bytes(31)
"""Signature, version 3.0, mechanism ``NULL``, as-server 0, filler: 64 octets."""


class WireError(Exception):
    """The peer broke ZMTP (or closed the connection) where this minimal DEALER expected more."""


def _frame(body: bytes, flags: int = 0) -> bytes:
    if len(body) > 255:
        return bytes([flags | LONG]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def _ready(socket_type: bytes) -> bytes:
    name = b"Socket-Type"
    return _frame(b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(socket_type)) + socket_type,
                  COMMAND)


class Dealer:
    """A connected ZMTP DEALER on the unix socket ``path``; ``timeout`` seconds per blocking step.

    Raises ``OSError`` (no socket, refused, timed out: ``TimeoutError``) or
    :class:`WireError` (not a ZMTP 3 peer, or one that closed the connection during the greeting)."""

    def __init__(self, path: str, timeout: float):
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        self.timeout = timeout
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            self._buf = b""
            try:
                self.sock.sendall(GREETING + _ready(b"DEALER"))
                greeting = self._read(64)
            except (BrokenPipeError, ConnectionResetError):  # it sent its own bytes, if any, and left
                raise WireError("the peer closed the connection") from None
            if greeting[0] != 0xFF or greeting[9] != 0x7F or greeting[10] < 3:
                raise WireError("the peer's greeting is not ZMTP 3")
            if greeting[12:32].rstrip(b"\x00") != b"NULL":
                raise WireError(f"the peer wants security mechanism {greeting[12:32].rstrip(bytes(1))!r}")
        except BaseException:
            self.sock.close()
            raise

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise WireError("the peer closed the connection")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def ready(self, timeout: float) -> bool:
        """True once the peer has sent something to read (within ``timeout`` seconds), False
        when nothing came; raises :class:`WireError` when the peer closed the connection."""
        if self._buf:
            return True
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(self.timeout)
        if not chunk:
            raise WireError("the peer closed the connection")
        self._buf += chunk
        return True

    def send(self, body: bytes) -> None:
        """Send a message of one frame."""
        self.sock.sendall(_frame(body))

    def recv(self) -> list[bytes]:
        """The next message (its frames), commands from the peer (``READY``, ``PING``) skipped."""
        frames: list[bytes] = []
        while True:
            flags = self._read(1)[0]
            size = struct.unpack(">Q", self._read(8))[0] if flags & LONG else self._read(1)[0]
            body = self._read(size)
            if flags & COMMAND:
                if body[1:1 + body[0]] == b"ERROR":
                    raise WireError(f"the peer sent ERROR: {body[7:]!r}")
                continue
            frames.append(body)
            if not flags & MORE:
                return frames

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()
