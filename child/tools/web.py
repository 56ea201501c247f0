"""The ``web`` toolset: ``web_extract`` (a page as readable text) and ``web_search``.

HTTP goes through ``httpx2`` (the HTTP client the Anthropic and OpenAI SDKs
already bring), imported on first use so a child that never touches the web
does not pay for it.  Bodies are read as a stream and cut at
``max_file_bytes``; the extracted text is capped at ``max_output_bytes``.

``web_search`` needs a backend: ``HERMES_WEB_SEARCH_URL`` names a JSON GET
endpoint.  The query goes in place of ``{query}`` in that URL, or, without the
placeholder, as the ``q`` parameter.  The answer must be a JSON object whose
``results`` is a list of objects with ``title``, ``url`` and ``snippet`` (or
``content``) — the shape SearXNG returns for
``HERMES_WEB_SEARCH_URL="http://localhost:8888/search?format=json"``.
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from urllib.parse import quote_plus, urlsplit

from child.tools import Tool, ToolContext, ToolError, cap_text, schema

SEARCH_URL_ENV = "HERMES_WEB_SEARCH_URL"
TIMEOUT_SECONDS = 20.0
USER_AGENT = "hermesd-web-tool/0.1"

_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
_BLOCK = {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
          "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p",
          "pre", "section", "table", "td", "th", "tr", "ul"}


class _TextExtractor(HTMLParser):
    """Collect the visible text of an HTML page: scripts, styles and the head
    dropped (the title kept), block elements on lines of their own."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self._parts: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self._parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK:
            self._parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self._parts.append(data)

    def text(self) -> str:
        """The collected text: runs of blanks collapsed, at most one empty line in a row."""
        lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(self._parts).split("\n"))
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def html_to_text(html: str) -> tuple[str, str]:
    """Return ``(title, text)`` of an HTML document."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return " ".join(parser.title.split()), parser.text()


def fetch(url: str, max_bytes: int) -> tuple[str, str, bytes, bool]:
    """GET ``url`` (http/https only, redirects followed) and return
    ``(final_url, content_type, body, cut)``; the body holds at most
    ``max_bytes`` bytes and ``cut`` says whether there was more.

    Raises :class:`ToolError` for another scheme, a network failure, a timeout
    (:data:`TIMEOUT_SECONDS`) or an HTTP status of 400 and above.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ToolError(f"only http:// and https:// URLs can be fetched, not {url!r}")
    import httpx2

    try:
        with httpx2.Client(follow_redirects=True, timeout=TIMEOUT_SECONDS,
                           headers={"User-Agent": USER_AGENT}) as client:
            with client.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise ToolError(f"GET {url} answered HTTP {response.status_code} {response.reason_phrase}")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        break
                return (str(response.url), response.headers.get("content-type", ""),
                        bytes(body[:max_bytes]), len(body) > max_bytes)
    except httpx2.HTTPError as exc:
        raise ToolError(f"cannot fetch {url}: {exc.__class__.__name__}: {exc or 'no detail'}") from None


def _decode(body: bytes, content_type: str) -> str:
    match = re.search(r"charset=([\w.-]+)", content_type, re.I)
    try:
        return body.decode(match.group(1) if match else "utf-8", "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


def web_extract(args: dict, ctx: ToolContext) -> str:
    """Handler of ``web_extract``: ``{"url"}`` → ``Title:``/``URL:`` lines and the
    page's readable text (HTML converted; text, JSON and XML as they are).

    Raises :class:`ToolError` for a non-http(s) URL, a network or HTTP error, or a
    binary content type.
    """
    url, content_type, body, cut = fetch(args["url"], int(ctx.limits["max_file_bytes"]))
    kind = content_type.split(";")[0].strip().lower()
    text = _decode(body, content_type)
    title = ""
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in text[:1000].lower()):
        title, text = html_to_text(text)
    elif kind and not (kind.startswith("text/") or kind.endswith(("json", "xml", "javascript"))):
        raise ToolError(f"{url} is {kind}, not a text page; web_extract only reads text")
    head = f"Title: {title}\nURL: {url}\n\n" if title else f"URL: {url}\n\n"
    if cut:
        text += "\n[page cut at max_file_bytes]"
    return cap_text(head + text, int(ctx.limits["max_output_bytes"]))


def search_url(template: str, query: str) -> str:
    """The backend URL for ``query``: ``{query}`` replaced, or ``q=`` appended."""
    if "{query}" in template:
        return template.replace("{query}", quote_plus(query))
    return f"{template}{'&' if '?' in template else '?'}q={quote_plus(query)}"


def web_search(args: dict, ctx: ToolContext) -> str:
    """Handler of ``web_search``: ``{"query", "max_results"?}`` → a JSON list of
    ``{"title", "url", "snippet"}``.

    Raises :class:`ToolError` when ``HERMES_WEB_SEARCH_URL`` is unset
    ("no web search backend configured"), or the backend fails or answers
    something other than the documented JSON.
    """
    template = os.environ.get(SEARCH_URL_ENV, "").strip()
    if not template:
        raise ToolError(f"no web search backend configured (set {SEARCH_URL_ENV}); "
                        "web_extract can still read a URL you know")
    url, _, body, cut = fetch(search_url(template, args["query"]), int(ctx.limits["max_file_bytes"]))
    try:
        if cut:
            raise ValueError("answer larger than max_file_bytes")
        results = json.loads(body)["results"]
        found = [{"title": str(r.get("title", "")), "url": str(r.get("url", "")),
                  "snippet": str(r.get("snippet", r.get("content", "")))} for r in results]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ToolError(f"the search backend at {url} did not answer the expected JSON "
                        f"({{\"results\": [{{title, url, snippet}}]}}): {exc}") from None
    found = found[:int(args.get("max_results", 5))]
    return cap_text(json.dumps(found, ensure_ascii=False, indent=1), int(ctx.limits["max_output_bytes"]))


TOOLS = [
    Tool("web_extract", "web",
         "Fetch a web page (http or https) and return its readable text.",
         schema({"url": {"type": "string", "minLength": 1, "description": "The page's http(s) URL."}},
                required=("url",)),
         web_extract, repeatable=True),
    Tool("web_search", "web",
         "Search the web; returns a JSON list of results with title, url and snippet. Only works where a "
         "search backend is configured.",
         schema({"query": {"type": "string", "minLength": 1, "description": "What to search for."},
                 "max_results": {"type": "integer", "minimum": 1, "maximum": 20,
                                 "description": "How many results (default 5)."}},
                required=("query",)),
         web_search, repeatable=True),
]
