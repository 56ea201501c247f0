"""Fake model servers for tests: real HTTP on 127.0.0.1, replies scripted per test.

:class:`FakeServer` is the shared machinery (a thread-per-request HTTP server on
an ephemeral port, a thread-safe queue of replies, the record of every request);
:mod:`tests.fakes.anthropic_server` and :mod:`tests.fakes.openai_server` speak the two APIs.
A real SDK, or a real child process given ``base_url=server.url``, talks to it
exactly as to the real service.

A queued item is a reply object (with ``write(out, request)``) or a callable
``request -> reply``; when the queue is empty the server's ``default`` answers.
Responses are HTTP/1.0 (one request per connection, the body ends when the
connection closes), which keeps streaming, truncation and delays simple.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Received:
    """One request the server got: ``method``, ``path``, ``headers`` (names in
    lower case), ``body`` (the parsed JSON, ``None`` if there was none); ``cache``: the
    server's :class:`tests.fakes.cache.PromptCache` (``None``: it counts none) and the
    ``usage`` it counted for this request once a reply asked."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    cache: Any = None
    usage: dict[str, Any] | None = None

    @property
    def streaming(self) -> bool:
        """True when the client asked for a server-sent-events stream (``"stream": true``)."""
        return isinstance(self.body, dict) and self.body.get("stream") is True


class Out:
    """What a reply writes with: a JSON response, or an SSE stream event by event."""

    def __init__(self, handler: BaseHTTPRequestHandler, closed: threading.Event):
        self._handler, self._closed = handler, closed
        self.headers: dict[str, str] = {}
        """Headers every response of this request carries (e.g. the rate-limit headers)."""

    def json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Send ``body`` as a complete JSON response with ``status`` and extra ``headers``."""
        data = json.dumps(body).encode()
        self._head(status, {"content-type": "application/json", "content-length": str(len(data)), **(headers or {})})
        self._handler.wfile.write(data)

    def sse_start(self, headers: dict[str, str] | None = None) -> None:
        """Start a ``text/event-stream`` 200 response."""
        self._head(200, {"content-type": "text/event-stream", "cache-control": "no-cache", **(headers or {})})

    def sse(self, event: str, data: Any) -> None:
        """Send one server-sent event (``data`` as JSON) and flush it."""
        self._handler.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self._handler.wfile.flush()

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, cut short when the server closes."""
        if seconds > 0:
            self._closed.wait(seconds)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self._handler.send_response(status)
        for name, value in {**self.headers, **headers}.items():
            self._handler.send_header(name, value)
        self._handler.end_headers()


class FakeServer:
    """A scripted HTTP server on ``127.0.0.1`` (running from construction until :meth:`close`).

    ``url``: ``http://127.0.0.1:PORT``; ``requests``: every :class:`Received`, in
    order; ``default``: reply (or callable) used when the queue is empty;
    ``delay``: seconds to wait before every reply; ``limits``: a
    :class:`tests.fakes.limits.Limits` gate that may refuse a request before its
    reply (which then stays queued) and adds the rate-limit headers to every
    response.  Subclasses set ``default``, :meth:`routes` (the paths they serve;
    others get a 404) and how a refusal and the headers look in their API
    (:meth:`refusal`, :meth:`limit_headers`, :meth:`output_tokens`, :meth:`input_tokens`).
    """

    def __init__(self, *, delay: float = 0.0, port: int = 0, limits: Any = None):
        self.delay = delay
        self.limits = limits
        self.requests: list[Received] = []
        self.default: Any = None
        self._queue: deque[Any] = deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"{type(self).__name__}", daemon=True)
        self._thread.start()

    def routes(self) -> tuple[str, ...]:
        """Path suffixes this server answers (``POST``)."""
        return ()

    def reply(self, *replies: Any) -> FakeServer:
        """Queue replies (objects with ``write(out, request)``, or callables
        ``request -> reply``), answered in order; returns ``self`` for chaining."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def pending(self) -> int:
        """How many queued replies are still unused."""
        with self._lock:
            return len(self._queue)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[Received]:
        """Wait until at least ``count`` requests arrived; returns them all.
        Raises :class:`TimeoutError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(self.requests)} requests after {timeout}s, expected {count}")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop serving (idempotent); replies in progress are cut short."""
        if not self._closed.is_set():
            self._closed.set()
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def refusal(self, refusal: Any, retry_headers: dict[str, str]) -> Any:
        """The reply saying no for a :class:`tests.fakes.limits.Refusal`."""
        raise NotImplementedError

    def limit_headers(self, snapshot: Any) -> dict[str, str]:
        """The rate-limit headers of a :class:`tests.fakes.limits.Snapshot`."""
        return {}

    def output_tokens(self, reply: Any) -> int:
        """The output tokens ``reply`` reports (charged to the output-token limit)."""
        return 0

    def input_tokens(self, reply: Any, request: Received) -> int | None:
        """The input tokens ``reply`` reports for ``request`` (charged to the input-token limit;
        None: none reported, the limit counts the request's text)."""
        return None

    def _answer(self, request: Received, out: Out) -> None:
        with self._lock:
            self.requests.append(request)
            queued = bool(self._queue)
            item = self._queue.popleft() if queued else self.default
        reply = item(request) if callable(item) and not hasattr(item, "write") else item
        if self.limits is not None and self._refused(request, out, reply, item if queued else None):
            return
        out.wait(self.delay)
        reply.write(out, request)

    def _refused(self, request: Received, out: Out, reply: Any, queued: Any) -> bool:
        """Ask the gate; a refused request is answered at once and its queued reply kept for the next."""
        refusal, snapshot = self.limits.admit(request.body, self.output_tokens(reply), self.input_tokens(reply, request))
        out.headers.update(self.limit_headers(snapshot))
        if refusal is None:
            return False
        if queued is not None:
            with self._lock:
                self._queue.appendleft(queued)
        self.refusal(refusal, self.limits.retry_headers(refusal)).write(out, request)
        return True


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            request = Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                               json.loads(raw) if raw else None, getattr(server, "cache", None))
            out = Out(self, server._closed)
            if not self.path.split("?")[0].endswith(server.routes()):
                out.json(404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}})
                return
            try:
                server._answer(request, out)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (e.g. an interrupted run)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def pieces(text: str, count: int = 3) -> list[str]:
    """``text`` cut into up to ``count`` consecutive non-empty pieces (for streamed deltas)."""
    size = max(1, -(-len(text) // count))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


PROVIDER_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE",
                "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY")
"""Environment variables that choose or configure a provider."""


def scrub_env(monkeypatch: Any) -> None:
    """Remove :data:`PROVIDER_ENV` for one test (``monkeypatch``: pytest's fixture),
    so the developer's own keys never reach a test or a fake server."""
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)


Responder = Callable[[Received], Any]
"""A callable queued instead of a reply: gets the request, returns the reply."""

__all__ = ["PROVIDER_ENV", "FakeServer", "Out", "Received", "Responder", "pieces", "scrub_env"]
