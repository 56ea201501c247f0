"""Who may see and act: the dashboard's token, its cookie, the CSRF check, the response headers.

The token is a random secret in ``HERMES_HOME/dashboard.token`` (0600, :mod:`hermesd.private`); the
URL ``hermesctl dashboard`` prints carries it once (``?token=``), which is answered with a cookie
(``HttpOnly; SameSite=Strict``, RFC 6265bis) and a redirect to the same page without it.  A scraper
sends it as ``Authorization: Bearer`` (Prometheus' ``authorization: credentials_file``).  Every
action is a POST carrying :func:`csrf_token` whose ``Origin`` (when sent; ``Sec-Fetch-Site``
likewise) is this site's own (OWASP's CSRF cheat sheet: synchronizer token, origin check)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, urlencode

from hermesd import paths, private

TOKEN_FILE = "dashboard.token"
COOKIE = "hermes_dashboard"
HEADERS = [(b"content-security-policy", b"default-src 'self'; img-src 'self' data:; style-src 'self'; "
            b"script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
           (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
           (b"referrer-policy", b"same-origin"), (b"cache-control", b"no-store")]
"""Sent with every response: no script, style or frame from elsewhere, no Referer to another site (a
URL with the token must not leak; ``same-origin``, not ``no-referrer``, under which a browser sends
``Origin: null`` with the page's own forms), nothing cached.  No ``Access-Control-*`` header is ever sent (no CORS)."""


def token_path(home: Path | None = None) -> Path:
    """``HERMES_HOME/dashboard.token``."""
    return (home or paths.hermes_home()) / TOKEN_FILE


def load_token(home: Path | None = None) -> str:
    """The dashboard's token, made (``secrets.token_urlsafe``, 256 bits) and written 0600 the first
    time.  Raises ``OSError``."""
    path = token_path(home)
    try:
        text = path.read_text(encoding="ascii").strip()
        if text:
            private.create_file(path)  # 0600 whatever made it
            return text
    except FileNotFoundError:
        pass
    paths.ensure_private_dir(path.parent)
    token = secrets.token_urlsafe(32)
    private.write_file(path, token + "\n")
    return token


def csrf_token(token: str) -> str:
    """The CSRF token of a dashboard token: an HMAC-SHA256 of it, so a form's token reveals nothing."""
    return hmac.new(token.encode(), b"hermesd dashboard csrf", hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    """Constant-time equality of two secrets."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def header(scope: dict[str, Any], name: bytes) -> str | None:
    """The first header ``name`` (lower case) of an ASGI ``scope``, as text."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


def presented(scope: dict[str, Any]) -> str | None:
    """The token a request carries: its cookie, else ``Authorization: Bearer``."""
    cookie = header(scope, b"cookie")
    if cookie:
        jar = SimpleCookie()
        try:
            jar.load(cookie)
        except Exception:  # noqa: BLE001 - a malformed cookie header is no token
            jar = SimpleCookie()
        if COOKIE in jar:
            return jar[COOKIE].value
    bearer = header(scope, b"authorization") or ""
    return bearer[7:].strip() if bearer.lower().startswith("bearer ") else None


def same_origin(scope: dict[str, Any]) -> bool:
    """Whether a request came from this site's own pages: its ``Sec-Fetch-Site`` (when sent) is
    ``same-origin`` and its ``Origin`` (when sent) is ``http(s)://`` this ``Host``."""
    site = header(scope, b"sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = header(scope, b"origin")
    if origin is None:
        return True
    host = header(scope, b"host") or ""
    return origin in (f"http://{host}", f"https://{host}")


class Guard:
    """ASGI middleware: every request needs the token (401 without; ``/metrics`` too unless
    ``metrics_public``), a ``?token=`` URL becomes the cookie, a POST needs the same origin (403)
    — the CSRF token itself is checked by the action (:func:`csrf_token`).  Adds :data:`HEADERS`."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str, metrics_public: bool = False):
        self.app, self.token, self.metrics_public = app, token, metrics_public

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:
            if not same(query["token"], self.token):
                return await plain(with_headers, 401, "this dashboard token is not the current one: run "
                                                      "`hermesctl dashboard` for the URL")
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            return await plain(with_headers, 303, "signed in", [(b"location", (scope["path"] + (
                f"?{rest}" if rest else "")).encode()), (b"set-cookie", cookie.encode())])
        public = self.metrics_public and scope["path"] == "/metrics"
        if not public and not same(presented(scope), self.token):
            return await plain(with_headers, 401, "the dashboard needs its token: open the URL `hermesctl dashboard` "
                                                  "prints (it sets a cookie)")
        if scope["method"] not in ("GET", "HEAD") and not same_origin(scope):
            return await plain(with_headers, 403, "refused: an action must come from the dashboard's own pages")
        return await self.app(scope, receive, with_headers)


async def plain(send: Callable, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer with ``status`` and ``text`` (plain text), and ``extra`` headers."""
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
