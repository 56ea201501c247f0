"""The commonest read-only commands without click or pyzmq: ``hermesctl status`` and ``hello``.

A whole ``hermesctl status`` used to spend most of its time importing click
and pyzmq, not asking (bench/bench_control.py).  When the command line is exactly one of
:data:`FAST` (the command alone, or with ``--json`` before or after it), the
request goes over :class:`client.zmtp.Dealer` and the reply is printed by the
:mod:`client.render` function the click command of that name uses (one
definition of what each prints).  Anything else — other commands, options,
``--help``, shell completion, a daemon that is not there, does not answer
within :data:`DEFAULT_TIMEOUT` or answers with an error — is left to the full
client (:mod:`client.ctl`), which then also says what went wrong; these
requests only read, so asking twice is harmless.  (``ps`` is not here: it
pages through ``Connection.jobs``, several requests.)  :func:`client.main` tries
this first.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from client import render, zmtp
from hermesd import paths, protocol

DEFAULT_TIMEOUT = 30.0
"""Seconds a client waits for one reply (``--timeout``), the same for every front end."""

FAST: dict[str, tuple[dict[str, Any], Callable[[Any, bool], None]]] = {
    "status": ({}, lambda st, as_json: render.emit_json(st) if as_json else print(render.status_text(st))),
    "hello": ({}, lambda h, as_json: render.emit_json(h) if as_json else print(render.hello_text(h))),
}
"""Command → (the request's args, print its result given ``--json`` or not)."""


def ask(op: str, args: dict[str, Any], timeout: float = DEFAULT_TIMEOUT) -> Any:
    """The result of one request over the control socket of the runtime directory.

    Raises ``OSError`` or :class:`client.zmtp.WireError` (no daemon, no answer
    within ``timeout`` seconds, a broken wire) and
    :class:`hermesd.protocol.ProtocolError` (the daemon's error)."""
    control = paths.sockets().control
    if os.stat(control).st_uid != os.getuid():  # root may connect anywhere: another user's socket is refused
        raise PermissionError(f"{control} is not yours")  # by the full client, naming it
    req_id, frame = protocol.encode_request(op, args)
    dealer = zmtp.Dealer(str(control), timeout)
    try:
        dealer.send(frame)
        while True:
            reply = protocol.decode_reply(dealer.recv()[-1])
            if reply.get("id") == req_id:
                return protocol.raise_for_reply(reply)
    finally:
        dealer.close()


def fast_command(argv: list[str]) -> tuple[str, bool] | None:
    """``(command, json)`` when ``argv`` is a command of :data:`FAST` alone or with one ``--json``, else None."""
    words = [a for a in argv if a != "--json"]
    if len(words) != 1 or words[0] not in FAST or len(argv) > 2:
        return None
    return words[0], len(argv) == 2


def run(argv: list[str]) -> bool:
    """Answer ``argv`` here if it is a fast command and the daemon answers it; False: the full
    client must run (see the module doc)."""
    fast = fast_command(argv)
    if fast is None:
        return False
    command, as_json = fast
    args, show = FAST[command]
    try:
        result = ask(command, args)
    except (OSError, zmtp.WireError, protocol.ProtocolError):
        return False
    try:
        show(result, as_json)
    except BrokenPipeError:  # the reader left (`| head`): exit 1 without a word, as the full client
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    return True
