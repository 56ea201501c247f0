"""The web toolset against a local HTTP server on 127.0.0.1 (the machine has no internet)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from child.tools.registry import ToolContext, execute

PAGE = b"""<!doctype html><html><head><title>Test  page</title>
<style>body { color: red }</style><script>var secret = 1;</script></head>
<body><h1>Heading</h1><p>First &amp; only   paragraph.</p><ul><li>one</li><li>two</li></ul>
<noscript>enable js</noscript></body></html>"""

ROUTES = {
    "/page": ("text/html; charset=utf-8", PAGE),
    "/plain": ("text/plain", b"just text"),
    "/big": ("text/plain", b"b" * 50000),
    "/image": ("image/png", b"\x89PNG\r\n"),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        if url.path == "/search":
            query = parse_qs(url.query)["q"][0]
            body = json.dumps({"results": [{"title": f"{query} {i}", "url": f"http://x/{i}", "content": "c"}
                                           for i in range(10)]}).encode()
            ctype = "application/json"
        elif url.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/plain")
            self.end_headers()
            return
        elif url.path in ROUTES:
            ctype, body = ROUTES[url.path]
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def ctx(tmp_path):
    return ToolContext(cwd=str(tmp_path))


def extract(url, ctx):
    return execute("web_extract", {"url": url}, ctx)


def test_html_page_becomes_readable_text(server, ctx):
    result = extract(server + "/page", ctx)
    assert result.ok, result.content
    assert result.content.startswith(f"Title: Test page\nURL: {server}/page\n\n")
    body = result.content.split("\n\n", 1)[1]
    assert body.splitlines() == ["Heading", "", "First & only paragraph.", "", "one", "", "two"]
    assert "secret" not in result.content and "color" not in result.content and "enable js" not in result.content


def test_plain_text_and_redirects(server, ctx):
    result = extract(server + "/redirect", ctx)
    assert result.ok and result.content == f"URL: {server}/plain\n\njust text"


def test_output_capped_and_body_cut(server, tmp_path):
    capped = extract(server + "/big", ToolContext(cwd=str(tmp_path), limits={"max_output_bytes": 1000}))
    assert capped.ok and "[output truncated:" in capped.content
    cut = extract(server + "/big", ToolContext(cwd=str(tmp_path), limits={"max_file_bytes": 100}))
    assert cut.ok and cut.content.endswith("b" * 100 + "\n[page cut at max_file_bytes]")


@pytest.mark.parametrize("path,message", [("/missing", "HTTP 404"), ("/image", "image/png, not a text page")])
def test_http_errors_and_binary_content_are_tool_errors(server, ctx, path, message):
    result = extract(server + path, ctx)
    assert not result.ok and message in result.content


def test_network_failure_is_a_clear_tool_error(ctx):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = extract(f"http://127.0.0.1:{port}/", ctx)
    assert not result.ok and result.content.startswith(f"web_extract: cannot fetch http://127.0.0.1:{port}/")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/x", "http://", "/relative"])
def test_only_http_and_https(ctx, url):
    result = extract(url, ctx)
    assert not result.ok and "only http:// and https://" in result.content


def test_web_search_without_backend(ctx, monkeypatch):
    monkeypatch.delenv("HERMES_WEB_SEARCH_URL", raising=False)
    result = execute("web_search", {"query": "x"}, ctx)
    assert not result.ok and "no web search backend configured" in result.content


def test_web_search_with_a_searxng_style_backend(server, ctx, monkeypatch):
    monkeypatch.setenv("HERMES_WEB_SEARCH_URL", server + "/search?format=json")
    result = execute("web_search", {"query": "hermes agent", "max_results": 2}, ctx)
    assert result.ok, result.content
    assert json.loads(result.content) == [{"title": "hermes agent 0", "url": "http://x/0", "snippet": "c"},
                                          {"title": "hermes agent 1", "url": "http://x/1", "snippet": "c"}]


def test_web_search_backend_with_wrong_answer(server, ctx, monkeypatch):
    monkeypatch.setenv("HERMES_WEB_SEARCH_URL", server + "/plain?q={query}")
    result = execute("web_search", {"query": "x"}, ctx)
    assert not result.ok and "did not answer the expected JSON" in result.content
