"""A loopback model server for the warm template: real HTTP on ``127.0.0.1``, one canned answer.

The zygote (:mod:`child.zygote`) runs each provider's first calls against it
(``warm_template``), so that what a child's first request does once — the SDK's
request and response models built, its HTTP transport's code paths run and
specialised by the interpreter — is done in the template and shared by every
child forked from it, instead of made private in each.  It serves ``count``
connections (one request each, ``connection: close``) in a thread the caller
joins before anything forks (:meth:`Loopback.close`), and never leaves the
host: nothing is sent to a real model, and no key is used.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

TIMEOUT = 5.0
"""Seconds the server waits for a connection or a request before it gives up."""


def response(body: bytes, content_type: str) -> bytes:
    """An HTTP/1.1 200 response carrying ``body`` that closes its connection."""
    head = (f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
            "request-id: req_warm\r\nconnection: close\r\n\r\n")
    return head.encode() + body


def sse(events: list[dict[str, Any]]) -> bytes:
    """Server-sent events, one per ``{"type": …}`` map, named by their type."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


class Loopback:
    """Answers ``count`` requests on ``127.0.0.1`` with ``answer`` (bytes of a whole
    response, :func:`response`), each on its own connection; ``url`` is
    ``http://127.0.0.1:PORT``.  Use as a context manager: leaving it joins the thread."""

    def __init__(self, answer: bytes, count: int):
        self.answer, self.count = answer, count
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(TIMEOUT)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.served = 0
        self.thread = threading.Thread(target=self._serve, name="hermes-warm-loopback", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            for _ in range(self.count):
                conn, _addr = self.sock.accept()
                with conn:
                    conn.settimeout(TIMEOUT)
                    _read_request(conn)
                    conn.sendall(self.answer)
                    self.served += 1
        except OSError:
            pass  # closed, timed out, or a client gave up: the warm-up is only less complete
        finally:
            self.sock.close()  # a call after this one is refused, not left waiting

    def close(self) -> None:
        """Stop serving and join the thread (the template must have no other thread when it forks)."""
        self.sock.close()
        self.thread.join(TIMEOUT + 1.0)

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_request(conn: socket.socket) -> None:
    """Read one request (head, then ``content-length`` bytes of body) and drop it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


CALLS = 10
"""Calls each provider makes in the template: more than the interpreter's warm-up count
(CPython 3.11 quickens a function on its 8th call), so a child runs code already specialised."""


def sample_request() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """A call as a child's second turn makes it: a system prompt, a user message, an assistant
    tool call and its result (:mod:`child.messages`), and every tool's definition."""
    from child import messages as m
    from child.tools import registry

    call = m.tool_use("terminal", {"command": "true"})
    messages = [m.user("warm up"), m.assistant([m.text("calling"), call]), m.user(m.tool_result(call["id"], "ok"))]
    tools = [registry.get_tool(name).spec() for name in registry.known_tool_names()]
    return "You are warming up.", messages, tools


def warm_calls(make: Any, answer: bytes, path: str = "") -> int:
    """Run :data:`CALLS` calls of the provider ``make(base_url, timeout)`` builds (through no
    proxy: ``trust_env=False``) against a :class:`Loopback` answering ``answer`` (``path``: added
    to its URL, e.g. ``/v1``); returns how many were answered.  Import the SDK first: the server
    waits :data:`TIMEOUT` seconds for each call.  A failed call ends the warm-up (it is only less complete) and is raised."""
    system, messages, tools = sample_request()
    with Loopback(answer, CALLS) as server:
        provider = make(server.url + path, TIMEOUT)
        try:
            for _ in range(CALLS):
                provider.complete(system, messages, tools, max_tokens=64)
        finally:
            client = getattr(provider, "_client", None)
            if client is not None:
                client.close()
    return server.served
