"""An MCP tool call's result (``CallToolResult``) as the text of a tool result.

Every content block becomes text, none is dropped silently (the model of a text-only tool
result is told what it cannot see):

* text: as it is;
* an image or audio clip: ``[image: image/png, 12345 bytes (base64), not shown]``;
* an embedded resource: its text under ``[resource URI (MIME)]``, a binary one described;
* a resource link: ``[resource link: NAME URI (MIME) - description]``;
* the structured content (``structuredContent``): as JSON after ``[structured content]``,
  unless a text block already holds the same value (``{"result": value}`` of a plain value
  included; servers send both, as the MCP
  specification asks of them: https://modelcontextprotocol.io/specification/2025-06-18/server/tools#structured-content);
* a block of a type this SDK does not know: ``[TYPE content, not shown]``.

``is_error`` makes it a tool error.  A duck-typed reader: it takes the SDK's models or their
plain-data form (``model_dump``), so it is tested without a server.
"""

from __future__ import annotations

import json
from typing import Any


def _get(block: Any, *names: str) -> Any:
    """The first of ``names`` set on ``block`` (a pydantic model or a dict)."""
    for name in names:
        value = block.get(name) if isinstance(block, dict) else getattr(block, name, None)
        if value is not None:
            return value
    return None


def _size(data: Any) -> str:
    """``N bytes (base64)`` of a base64 string: the size of what it encodes."""
    text = str(data or "")
    return f"{len(text) * 3 // 4 - text.count('=')} bytes (base64)"


def _resource(resource: Any) -> str:
    uri, mime = _get(resource, "uri") or "?", _get(resource, "mime_type", "mimeType")
    head = f"[resource {uri}" + (f" ({mime})" if mime else "") + "]"
    text = _get(resource, "text")
    if text is not None:
        return f"{head}\n{text}"
    return f"{head} binary, {_size(_get(resource, 'blob'))}, not shown"


def block_text(block: Any) -> str:
    """One content block as text (see the module doc)."""
    kind = _get(block, "type") or "unknown"
    if kind == "text":
        return str(_get(block, "text") or "")
    if kind in ("image", "audio"):
        return f"[{kind}: {_get(block, 'mime_type', 'mimeType') or 'unknown type'}, {_size(_get(block, 'data'))}, not shown]"
    if kind == "resource":
        return _resource(_get(block, "resource") or {})
    if kind == "resource_link":
        mime, about = _get(block, "mime_type", "mimeType"), _get(block, "description")
        return (f"[resource link: {_get(block, 'name') or ''} {_get(block, 'uri') or '?'}".rstrip()
                + (f" ({mime})" if mime else "") + (f" - {about}" if about else "") + "]")
    return f"[{kind} content, not shown]"


def result_text(result: Any) -> tuple[bool, str]:
    """``(ok, text)`` of a ``CallToolResult`` (or its plain-data form): ``ok`` is not ``is_error``."""
    blocks = list(_get(result, "content") or [])
    parts = [block_text(b) for b in blocks]
    structured = _get(result, "structured_content", "structuredContent")
    if structured is not None:
        texts = [b for b in blocks if _get(b, "type") == "text"]
        if not any(_same_json(_get(b, "text"), structured) for b in texts):
            parts.append("[structured content]\n" + json.dumps(structured, ensure_ascii=False, indent=1))
    error = bool(_get(result, "is_error", "isError"))
    text = "\n".join(p for p in parts if p) or ("(the tool reported an error and said nothing more)" if error
                                                else "(no content)")
    return not error, text


def _same_json(text: Any, value: Any) -> bool:
    """Whether ``text`` holds ``value``: as its JSON, or as the value the SDK's servers wrap a plain
    return value in (``{"result": value}``, the MCP Python SDK's ``structured_output``)."""
    if isinstance(value, dict) and list(value) == ["result"] and _same_json(text, value["result"]):
        return True
    if isinstance(value, str) and text == value:
        return True
    try:
        return json.loads(str(text)) == value
    except ValueError:
        return False
