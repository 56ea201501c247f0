"""Fuzzing the control socket: the ops and their arguments from the router, frames of every kind.

The ops are :data:`hermesd.server.ROUTER`'s (client and child tables); each op's arguments are read
from its handler's source and from the functions of the daemon it calls (two calls deep): every
``arg(args, "NAME", TYPES…)`` (whose ``TYPES`` say which values are of the wrong type),
``args.get("NAME")`` and ``args["NAME"]`` (of unknown type: every value is tried).  The frames
(:func:`frames`, ``count`` in all, from a seed):

* every op with a wrong-typed value in each of its arguments, over and over (``shutdown`` is left
  out: the one op that, well-formed by chance, would end the run by design);
* random msgpack (maps, lists, numbers near the 64-bit edges, bad UTF-8, deep nesting);
* raw ZMTP 3 on the Unix socket (https://rfc.zeromq.org/spec/23/): a greeting then a frame whose
  header claims more than follows (truncated), a frame claiming more than the daemon reads
  (oversized), a garbage greeting.

:func:`fuzz` sends them and checks every answer is a typed error (``error.code`` one of
:data:`hermesd.protocol.ERROR_CODES`) or a success; a connection the daemon closes is fine.
"""

from __future__ import annotations

import ast
import inspect
import random
import socket
import struct
import textwrap
from typing import Any, Iterator

import msgpack
import zmq

from hermesd import protocol

SKIPPED = {"shutdown"}
ACTING = {"pause", "resume", "clean", "reload", "worktrees.prune"}
"""Ops that act when sent with no arguments at all: they get only wrong-typed arguments."""
WRONG = [None, True, -1, 0, 1 << 63, -(1 << 63), 2.5, float("nan"), "", "x" * 3000, b"\x00\xff", [], [None] * 20,
         {}, {"a": {"b": []}}, {1: 2}, "../../etc/passwd", "deleg_000000000000", "*"]
TYPE_NAMES = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict, "bytes": bytes}


def _names(fn: Any, depth: int = 2, seen: set[int] | None = None) -> dict[str, tuple[type, ...] | None]:
    """The arguments ``fn`` reads (``{name: types or None}``), following the calls it makes."""
    seen = seen if seen is not None else set()
    if id(fn) in seen or not callable(fn):
        return {}
    seen.add(id(fn))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return {}
    found: dict[str, tuple[type, ...] | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name == "arg" and len(node.args) >= 3 and strings:
                found[strings[0]] = _types(node.args[2])
            elif name == "get" and isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") == "args" \
                    and strings:
                found.setdefault(strings[0], None)
            elif depth > 0 and isinstance(node.func, ast.Name):
                callee = getattr(inspect.getmodule(fn), node.func.id, None)
                if inspect.isfunction(callee) and callee.__module__.startswith(("hermesd", "batch")):
                    for key, value in _names(callee, depth - 1, seen).items():
                        found.setdefault(key, value)
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "args" \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            found.setdefault(node.slice.value, None)
    return found


def _types(node: ast.AST) -> tuple[type, ...] | None:
    names = [e.id for e in node.elts] if isinstance(node, ast.Tuple) else [getattr(node, "id", "")]
    types = tuple(TYPE_NAMES[n] for n in names if n in TYPE_NAMES)
    return types or None


def registry() -> dict[str, dict[str, tuple[type, ...] | None]]:
    """Every op of the router (client and child) with the arguments its handler reads."""
    from hermesd.server import ROUTER

    ops = {**ROUTER.ops, **ROUTER.child_ops}
    return {name: _names(fn) for name, fn in sorted(ops.items()) if name not in SKIPPED}


def _wrong(types: tuple[type, ...] | None) -> list[Any]:
    if types is None:
        return WRONG
    return [v for v in WRONG if not isinstance(v, types) or (isinstance(v, bool) and bool not in types)]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice(WRONG)
    if roll < 0.75:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["op", "args", "id", "v", "x", 1]): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def frames(rng: random.Random, count: int) -> Iterator[tuple[str, Any]]:
    """``count`` frames: ``("zmq", bytes)`` for the control socket as a client sends them, ``("child",
    bytes)`` the same for ``children.sock`` (the child ops), ``("raw", bytes)`` for bytes written on a
    bare Unix-socket connection to the control socket."""
    table = registry()
    typed = [(op, name, value) for op, names in table.items() for name, types in names.items()
             for value in _wrong(types)] + [(op, "", None) for op in table if op not in ACTING]
    sent = 0
    while sent < count:
        roll = rng.random()
        if roll < 0.6:
            op, name, value = typed[sent % len(typed)] if rng.random() < 0.7 else rng.choice(typed)
            args = {name: value} if name else {}
            frame = msgpack.packb({"v": protocol.PROTOCOL_VERSION, "id": sent, "op": op, "args": args},
                                  use_bin_type=True)
            yield ("child" if op.startswith("child.") else "zmq"), frame
        elif roll < 0.85:
            yield rng.choice(["zmq", "zmq", "child"]), msgpack.packb(_random_value(rng), use_bin_type=True) if rng.random() < 0.7 \
                else rng.randbytes(rng.randrange(1, 200))
        else:
            yield "raw", _raw(rng)
        sent += 1


GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
"""The ZMTP 3.0 greeting of a NULL-mechanism client (64 bytes)."""


def _raw(rng: random.Random) -> bytes:
    ready = b"\x04" + bytes([len(b"\x05READY" + b"\x0bSocket-Type\x00\x00\x00\x06DEALER")]) + \
        b"\x05READY" + b"\x0bSocket-Type\x00\x00\x00\x06DEALER"
    kind = rng.choice(["truncated", "oversized", "garbage", "half-greeting"])
    if kind == "truncated":
        return GREETING + ready + b"\x02" + struct.pack(">Q", 1000) + rng.randbytes(rng.randrange(0, 999))
    if kind == "oversized":
        return GREETING + ready + b"\x02" + struct.pack(">Q", protocol.MAX_FRAME_READ * 4) + rng.randbytes(1000)
    if kind == "garbage":
        return rng.randbytes(rng.randrange(1, 300))
    return GREETING[:rng.randrange(1, 64)]


def warm_up(runtime: Any) -> None:
    """Call every op of :func:`registry` once with no arguments (but :data:`ACTING`'s, given a wrong
    type), waiting for each answer: what an op imports on its first call is then in the daemon before
    its footprint is taken."""
    context = zmq.Context.instance()
    for op, names in registry().items():
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"ipc://{runtime / ('children.sock' if op.startswith('child.') else 'hermesd.sock')}")
        args = {next(iter(names)): float("nan")} if op in ACTING and names else {}
        if op not in ACTING or args:
            sock.send(msgpack.packb({"v": protocol.PROTOCOL_VERSION, "id": 1, "op": op, "args": args}))
            sock.poll(10_000)
        sock.close()


def fuzz(runtime: Any, seed: int, count: int) -> dict[str, Any]:
    """Send :func:`frames` to the daemon's control socket in ``runtime``; returns ``{sent, answered,
    closed, untyped}`` (``untyped``: answers that were neither a success nor a typed error, kept whole)."""
    rng = random.Random(seed)
    path = str(runtime / "hermesd.sock")
    context = zmq.Context.instance()
    socks = {}
    for kind, name in (("zmq", "hermesd.sock"), ("child", "children.sock")):
        socks[kind] = context.socket(zmq.DEALER)
        socks[kind].setsockopt(zmq.LINGER, 0)
        socks[kind].connect(f"ipc://{runtime / name}")
    stats: dict[str, Any] = {"sent": 0, "answered": 0, "raw": 0, "untyped": []}

    def take(wait_ms: int) -> None:
        """Read the answers there are; with ``wait_ms``, until none came for that long."""
        poller = zmq.Poller()
        for sock in socks.values():
            poller.register(sock, zmq.POLLIN)
        while ready := dict(poller.poll(wait_ms)):
            reply = next(iter(ready)).recv_multipart()[-1]
            stats["answered"] += 1
            try:
                decoded = protocol.decode_reply(reply)
                if not decoded["ok"] and decoded["error"]["code"] not in protocol.ERROR_CODES:
                    stats["untyped"].append(decoded)
            except Exception as exc:  # noqa: BLE001 - an answer that is not a reply is the finding
                stats["untyped"].append(f"{type(exc).__name__}: {reply[:80]!r}")

    try:
        for kind, data in frames(rng, count):
            stats["sent"] += 1
            if kind in socks:
                socks[kind].send(data)
            else:
                stats["raw"] += 1
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                    raw.settimeout(2.0)
                    try:
                        raw.connect(path)
                        raw.sendall(data)
                    except OSError:
                        pass  # the daemon closed it: allowed
            take(0)
        take(3000)  # until the daemon has been quiet for a while
    finally:
        for sock in socks.values():
            sock.close()
    return stats


__all__ = ["frames", "fuzz", "registry", "warm_up"]
