"""The wire protocol shared by hermesd, its clients and its children.

This is the only daemon module that clients (``client/``) and children
(``child/``) import.  Everything that crosses a socket is a msgpack map:

* request  ``{"v": 1, "id": ID, "op": NAME, "args": {...}}``
* reply    ``{"v": 1, "id": ID, "ok": true, "result": ...}``
* error    ``{"v": 1, "id": ID, "ok": false,
             "error": {"code": CODE, "message": TEXT, "details": {...}}}``
* event    ``{"v": 1, "seq": N, "type": T, "time": ISO8601, "job": ID|None,
             "session": ID|None, "data": {...}}`` published as the two frames
  ``[b"event", msgpack(event)]`` on ``events.sock``.

Children speak the same envelope on ``children.sock``, with the ``child.*``
ops listed in :data:`CHILD_OPS`.

The set of error codes is closed: :data:`ERROR_CODES` documents each one,
and :data:`EXIT_CODES` gives the exit status ``hermesctl`` uses for it
(``docs/protocol.md`` is checked against both by the test suite).
"""

from __future__ import annotations

import itertools
import os
import re
from collections import namedtuple

import msgpack

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a fast command's start pays for it)
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest frame either side accepts (16 MiB); larger frames get ``too_large``.
The daemon's sockets read frames up to :data:`MAX_FRAME_READ` to say so; past
that, ZeroMQ drops the connection and the sender gets no reply."""
MAX_FRAME_READ = 2 * MAX_MESSAGE_BYTES
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
"""The integers a frame may carry anywhere: SQLite's signed 64-bit range."""
REPLY_BUDGET = MAX_MESSAGE_BYTES // 2
"""Bytes of list items a reply may carry (see :func:`fit`); the rest of the frame is headroom."""

EVENT_TOPIC = b"event"

ERROR_CODES: dict[str, str] = {
    "bad_request": "The frame is not a valid request: not msgpack, not a map, "
    "a missing or mistyped field, or an argument of the wrong type or value.",
    "unknown_op": "The op is not one the daemon knows.",
    "not_found": "The job, session, board, task or profile named does not exist.",
    "capacity_reached": "A cap is full (delegation.max_async_children, "
    "supervisor.max_children); the message says how to fall back.",
    "depth_limit": "A delegation would go deeper than delegation.max_spawn_depth.",
    "invalid_state": "The object is not in a state that allows the operation "
    "(e.g. cancelling a finished job).",
    "invalid_config": "The configuration file is invalid; details name file, line and key.",
    "too_large": "The frame is larger than MAX_MESSAGE_BYTES, or a value exceeds a limit.",
    "version_mismatch": "The request's protocol version is not one this daemon speaks.",
    "shutting_down": "The daemon is stopping and accepts no new work.",
    "state_unavailable": "The state database cannot take the request's write now (another process holds "
    "its lock, the disk is full or read-only) after waiting a few seconds; the message says whether "
    "anything was changed (usually nothing: try again). Ends of jobs are kept and written later.",
    "not_a_repository": "A job asked for a git worktree of its own (--worktree) but its working directory is "
    "in no git repository (or git is not installed); nothing was started.",
    "internal": "An unexpected error inside the daemon; the daemon stays up.",
}

EXIT_CODES: dict[str, int] = {
    "bad_request": 2,
    "unknown_op": 2,
    "not_found": 5,
    "capacity_reached": 4,
    "depth_limit": 4,
    "invalid_state": 6,
    "invalid_config": 7,
    "too_large": 2,
    "version_mismatch": 8,
    "shutting_down": 3,
    "state_unavailable": 12,
    "not_a_repository": 14,
    "internal": 1,
    # client-side conditions, never sent by the daemon:
    "daemon_not_running": 3,
    "not_hermesd": 3,
    "timeout": 9,
    "job_failed": 10,
    "prompts_failed": 11,
    "budget_exceeded": 13,
}
"""Exit status of ``hermesctl`` per error code (0 is success, 2 is also click's usage error)."""

EXIT_MEANINGS: dict[int, str] = {
    0: "ok", 1: "internal error", 2: "usage or bad request", 3: "daemon not running (or not hermesd) or shutting down",
    4: "capacity reached", 5: "not found", 6: "invalid state", 7: "invalid config", 8: "version mismatch",
    9: "timeout", 10: "the job did not complete", 11: "prompts failed", 12: "state database unavailable",
    13: "budget exceeded", 14: "not a git repository", 130: "interrupted",
}
"""What each exit status of ``hermesctl`` means, in a few words (its ``--help``); every status
of :data:`EXIT_CODES` is here."""


def exit_codes_text() -> str:
    """``"Exit codes: 0 ok, 1 internal error, …, 130 interrupted."``: :data:`EXIT_MEANINGS` as one
    sentence."""
    return "Exit codes: " + ", ".join(f"{code} {text}" for code, text in EXIT_MEANINGS.items()) + "."

CHILD_OPS = ("child.hello", "child.progress", "child.result", "child.delegate", "child.call")
"""Ops a child process sends on ``children.sock``.

* ``child.hello {job, pid, token}`` → the job spec (``hermesd.contract.wire.JobSpec``).
* ``child.progress {job, token, turn, tool?, tokens?, text?, activity?, provider?, model?}`` → ``{}``.
* ``child.result {job, token, ...}`` with the fields of ``hermesd.contract.wire.JobResult``
  (below) → ``{}``.
* ``child.delegate {job, token, tasks: [...], background, ...}`` → delegation results.
* ``child.call {job, token, op, args}`` → the child op ``op`` with ``args`` (how the
  ``kanban`` tools send ``kanban.<verb>``; the daemon routes it like any child op).
"""


class ProtocolError(Exception):
    """An error that travels on the wire.

    ``code`` is one of :data:`ERROR_CODES`; ``message`` is for people;
    ``details`` is a small map for programs (e.g. ``{"file": ..., "line": ...}``).
    Raises ``ValueError`` when ``code`` is not in the closed set.
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None):
        if code not in ERROR_CODES:
            raise ValueError(f"unknown protocol error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def to_wire(self) -> dict[str, Any]:
        """Return the ``error`` map of a reply."""
        return {"code": self.code, "message": self.message, "details": self.details}


class Request(namedtuple("Request", "id op args")):
    """A decoded, validated request: ``id`` (str or int), ``op`` (str), ``args`` (dict).
    (A named tuple of :mod:`collections`: ``dataclasses`` or ``typing.NamedTuple`` would cost a
    client's start their import.)"""

    __slots__ = ()


_ids = itertools.count(1)


def new_request_id() -> str:
    """Return a request id unique within this process: ``"<pid>-<n>"``."""
    return f"{os.getpid()}-{next(_ids)}"


def packb(obj: Any) -> bytes:
    """Encode ``obj`` as msgpack (binary type for bytes, str for text)."""
    return msgpack.packb(obj, use_bin_type=True)


def unpackb(frame: bytes) -> Any:
    """Decode one msgpack frame, refusing frames over :data:`MAX_MESSAGE_BYTES`.

    Raises :class:`ProtocolError` (``too_large`` or ``bad_request``).
    """
    if len(frame) > MAX_MESSAGE_BYTES:
        raise ProtocolError("too_large", f"frame of {len(frame)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        return msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises many types for bad input
        raise ProtocolError("bad_request", f"frame is not valid msgpack: {exc.__class__.__name__}") from None


def encode_request(op: str, args: dict[str, Any] | None = None, req_id: Any = None) -> tuple[Any, bytes]:
    """Build a request frame; returns ``(id, frame)``."""
    req_id = new_request_id() if req_id is None else req_id
    return req_id, packb({"v": PROTOCOL_VERSION, "id": req_id, "op": op, "args": args or {}})


def decode_request(frame: bytes) -> Request:
    """Decode and validate a request frame.

    Raises :class:`ProtocolError` with ``too_large``, ``bad_request`` or
    ``version_mismatch``; the exception carries ``req_id`` (or ``None``) so the
    caller can still address its error reply.
    """
    msg = unpackb(frame)
    if not isinstance(msg, dict):
        raise ProtocolError("bad_request", "request must be a msgpack map")
    req_id = msg.get("id")
    try:
        if not isinstance(req_id, (str, int)) or isinstance(req_id, bool):
            raise ProtocolError("bad_request", "request field 'id' must be a string or integer")
        version = msg.get("v")
        if version != PROTOCOL_VERSION:
            raise ProtocolError("version_mismatch",
                                f"protocol version {version!r} not supported; this daemon speaks {PROTOCOL_VERSION}",
                                {"supported": [PROTOCOL_VERSION]})
        op = msg.get("op")
        if not isinstance(op, str) or not op:
            raise ProtocolError("bad_request", "request field 'op' must be a non-empty string")
        args = msg.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ProtocolError("bad_request", "request field 'args' must be a map")
        if may_hold_bad_numbers(frame):
            check_ints(args)
        return Request(req_id, op, args)
    except ProtocolError as err:
        err.req_id = req_id if isinstance(req_id, (str, int)) and not isinstance(req_id, bool) else None
        raise


def encode_reply(req_id: Any, result: Any) -> bytes:
    """Build a success reply frame."""
    return packb({"v": PROTOCOL_VERSION, "id": req_id, "ok": True, "result": result})


def encode_error(req_id: Any, err: ProtocolError) -> bytes:
    """Build an error reply frame from a :class:`ProtocolError`."""
    return packb({"v": PROTOCOL_VERSION, "id": req_id, "ok": False, "error": err.to_wire()})


def decode_reply(frame: bytes) -> dict[str, Any]:
    """Decode a reply frame into a map with ``id``, ``ok`` and ``result`` or ``error``.

    Raises :class:`ProtocolError` (``bad_request``) when the frame is not a reply.
    """
    msg = unpackb(frame)
    if not isinstance(msg, dict) or "ok" not in msg or "id" not in msg:
        raise ProtocolError("bad_request", "reply must be a map with 'id' and 'ok'")
    return msg


def raise_for_reply(reply: dict[str, Any]) -> Any:
    """Return ``reply["result"]`` or raise the :class:`ProtocolError` it carries."""
    if reply.get("ok"):
        return reply.get("result")
    err = reply.get("error") or {}
    code = err.get("code") if err.get("code") in ERROR_CODES else "internal"
    raise ProtocolError(code, str(err.get("message", "")), err.get("details") or {})


def encode_event(event: dict[str, Any]) -> list[bytes]:
    """Return the PUB frames ``[EVENT_TOPIC, msgpack(event)]`` of an event map."""
    return [EVENT_TOPIC, packb(event)]


_BAD_NUMBER_MARKS = rb"\xcf|\xcb[\x7f\xff][\xf0-\xff]|\xca[\x7f\xff][\x80-\xff]"
"""Bytes a msgpack frame must contain to carry an integer or float :func:`check_ints` refuses
(msgpack spec, "formats"): ``0xcf`` starts a uint64 (the only integer format that holds
more than :data:`INT64_MAX`); a float 64 (``0xcb``) or float 32 (``0xca``) whose exponent
bits are all ones is an infinity or a NaN (IEEE 754).  Compiled at its first use (by ``re``'s
cache): a client, which never decodes a request, does without compiling it."""


def may_hold_bad_numbers(frame: bytes) -> bool:
    """False when the msgpack ``frame`` cannot hold a number :func:`check_ints` refuses: a
    scan of the bytes in C instead of a walk of every value (a child's result carries its
    whole trajectory).  True means "maybe" (the marks may sit inside a string)."""
    return re.search(_BAD_NUMBER_MARKS, frame) is not None


def check_ints(value: Any, where: str = "", depth: int = 0) -> None:
    """Raise ``bad_request`` naming the field (``tasks[2].max_turns``) when any
    integer inside ``value`` (maps and lists, nested) is outside the signed
    64-bit range SQLite stores (:data:`INT64_MIN` … :data:`INT64_MAX`); msgpack
    carries unsigned 64-bit integers, which would otherwise fail deep inside
    the daemon.  Floats that are not finite are refused the same way."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ProtocolError("bad_request", f"argument '{where}' is out of range (signed 64-bit integers only)",
                                {"field": where})
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ProtocolError("bad_request", f"argument '{where}' must be a finite number", {"field": where})
    elif depth < 32 and isinstance(value, dict):
        for key, item in value.items():
            check_ints(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif depth < 32 and isinstance(value, list):
        for i, item in enumerate(value):
            check_ints(item, f"{where}[{i}]", depth + 1)


def in_range(value: Any, name: str, lo: float | None = None, hi: float | None = None) -> Any:
    """``value`` when ``lo <= value <= hi`` (either bound optional; None passes);
    else ``ProtocolError(bad_request)`` naming ``name`` and the range."""
    if value is None or ((lo is None or value >= lo) and (hi is None or value <= hi)):
        return value
    bounds = (f"between {lo} and {hi}" if lo is not None and hi is not None
              else f">= {lo}" if lo is not None else f"<= {hi}")
    raise ProtocolError("bad_request", f"argument '{name}' must be {bounds}, not {value}", {"field": name})


def arg(args: dict[str, Any], name: str, types: type | tuple[type, ...], default: Any = ...,
        *, choices: tuple[Any, ...] | None = None, lo: float | None = None, hi: float | None = None) -> Any:
    """Fetch and type-check one request argument.

    ``default`` omitted means the argument is required.  Booleans are never
    accepted where integers are expected; numbers must lie within ``lo`` …
    ``hi`` when given (see :func:`in_range`).  Raises :class:`ProtocolError`
    (``bad_request``) naming the argument when it is missing, of the wrong
    type, out of range, or not one of ``choices``.
    """
    if name not in args or args[name] is None:
        if default is ...:
            raise ProtocolError("bad_request", f"missing argument '{name}'", {"field": name})
        return default
    value = args[name]
    tlist = types if isinstance(types, tuple) else (types,)
    if (isinstance(value, bool) and bool not in tlist) or not isinstance(value, tlist):
        names = "/".join(t.__name__ for t in tlist)
        raise ProtocolError("bad_request", f"argument '{name}' must be {names}, not {type(value).__name__}",
                            {"field": name})
    if choices is not None and value not in choices:
        raise ProtocolError("bad_request", f"argument '{name}' must be one of {', '.join(map(str, choices))}",
                            {"field": name})
    return in_range(value, name, lo, hi)


def fit(items: list[Any], budget: int = REPLY_BUDGET) -> tuple[list[Any], bool]:
    """The longest prefix of ``items`` whose msgpack size stays within ``budget`` bytes
    (at least one item), and whether that is all of them.  For list replies
    (``ps``, ``events_since``) that must fit a frame: the caller says ``more``."""
    total = 0
    for i, item in enumerate(items):
        total += len(packb(item))
        if total > budget and i > 0:
            return items[:i], False
    return items, True


def one_line(text: Any, width: int | None = None) -> str:
    """``text`` as one printable line: control characters (NUL, newlines, escapes)
    become spaces and runs of whitespace one space; cut to ``width`` characters
    with an ellipsis when given.  For process titles, logs and terminal tables,
    which a NUL byte or an escape sequence would break."""
    line = " ".join("".join(c if c.isprintable() else " " for c in str(text or "")).split())
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def counted(n: Any, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, singular when ``n`` is 1: ``1 call``, ``3 calls``, ``0 calls`` (``plural``
    when not ``noun + "s"``; a missing ``n`` counts as 0).  For the clients' output and the
    children's logs alike."""
    n = n or 0
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def doing_text(activity: str | None, api_calls: int) -> str:
    """What a child was doing, as a job's error says it: ``"waiting for the model's first
    reply (0 model calls completed)"``; ``""`` when it never said (``activity`` None)."""
    if not activity:
        return ""
    return f"{activity} ({counted(api_calls, 'model call')} completed)"


def timed_out_text(seconds: float, activity: str | None, api_calls: int) -> str:
    """The error of a timed-out job, from the child (its own clock) or the daemon (its backstop):
    ``"timed out after 600 s in tool terminal running `pytest -x` (3 model calls completed)"``."""
    doing = doing_text(activity, api_calls)
    return f"timed out after {seconds:g} s" + (f" {doing}" if doing else "")


def expand_toolsets(names: list[str]) -> list[str]:
    """Expand ``all``/``*`` (every toolset of :data:`hermesd.contract.toolsets.TOOLSETS` but
    :data:`~hermesd.contract.toolsets.EXPLICIT_ONLY`, ``kanban``) and de-duplicate, keeping order.
    ``mcp:NAME`` passes (whether its server exists is the daemon's check: ``hermesd.mcp.ops``).

    Raises :class:`ProtocolError` (``bad_request``) naming unknown toolsets.
    """
    from hermesd.contract.toolsets import EXPLICIT_ONLY, MCP_TOOLSET, TOOLSETS  # not at import: a client's start does without it

    out: list[str] = []
    unknown = [n for n in names if n not in TOOLSETS and n not in ("all", "*")
               and not (n.startswith(MCP_TOOLSET) and len(n) > len(MCP_TOOLSET))]
    if unknown:
        raise ProtocolError("bad_request", f"unknown toolset(s) {', '.join(map(repr, unknown))}; "
                            f"known: {', '.join(TOOLSETS)}, all, {MCP_TOOLSET}NAME (a server of mcp_servers)",
                            {"field": "toolsets"})
    for name in names:
        for item in ([t for t in TOOLSETS if t not in EXPLICIT_ONLY] if name in ("all", "*") else [name]):
            if item not in out:
                out.append(item)
    return out
