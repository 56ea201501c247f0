"""The commands scripts call, without click or pyzmq: the fast path of ``hermesctl``.

A whole ``hermesctl status`` used to spend most of its time importing click
and pyzmq, not asking (bench/bench_control.py).  :func:`run` parses a command line of a
command of :data:`client.verbs.VERBS` (``status``, ``hello``, ``delegate``, ``ps``,
``result``, ``wait``, ``cancel``, ``events``) itself, from the same parameter
definitions the click commands are made of, and runs the command's one body
(:mod:`client.verbs`) over :class:`Link`: requests on :class:`client.zmtp.Dealer`,
and everything built on them (pages, waiting across a daemon restart) from
:class:`client.calls.Calls`, as the full client's :class:`client.connection.Connection`.
So the output, the errors (``not_found``, a timeout, a daemon that stops) and the
exit codes are the full client's.

What it leaves to the full client (:mod:`client.ctl`), which then does
everything, including saying what went wrong: a command line it does not
parse exactly as click would (``--help``, an unknown or malformed option, a
value out of range, a missing argument, ``-`` for standard input, a file
option), an option only the full client serves (``events --follow``), a wait
shown live on a terminal, shell completion, and a daemon it cannot connect to
before anything was sent (not running, not ours).  :func:`client.main` tries
this first.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from client import zmtp
from client.calls import (Calls, ClientError, check_socket, daemon_gone, lock_pid, not_hermesd, not_running, replaced,
                          too_large)
from client.verbs import INTERRUPTED, VERBS, Arg, Opt, Session, Usage, Verb, waits_for_job
from hermesd import paths, protocol

TYPE_CHECKING = False  # as hermesd.protocol's: typing is not imported
if TYPE_CHECKING:
    from typing import Any

DEFAULT_TIMEOUT = 30.0
"""Seconds a client waits for one reply (``--timeout``), the same for every front end."""


class Fallback(Exception):
    """The fast path cannot go on and has sent nothing: the full client runs the command line."""


class Link(Calls):
    """Requests over one :class:`client.zmtp.Dealer` on the control socket of ``runtime_dir``
    (default: the environment's), ``timeout`` seconds per reply; :class:`client.calls.Calls`
    builds the rest on :meth:`call`."""

    def __init__(self, runtime_dir: str | None, timeout: float):
        self.sockets = paths.sockets(Path(runtime_dir) if runtime_dir else None)
        self.timeout = timeout
        self.dealer: zmtp.Dealer | None = None
        self.sent = False
        self.served_by: int | None = None

    def _connect(self) -> zmtp.Dealer:
        control = self.sockets.control
        try:
            if os.stat(control).st_uid != os.getuid():  # root may connect anywhere: refused by the full client
                raise PermissionError(f"{control} is not yours")
            dealer = zmtp.Dealer(str(control), self.timeout)
        except (OSError, zmtp.WireError) as exc:
            if isinstance(exc, zmtp.WireError) and not daemon_gone(self.sockets):
                raise not_hermesd(control, str(exc)) from None
            if not self.sent:
                raise Fallback from None
            check_socket(control)  # as Connection would say it, once it had asked
            why = daemon_gone(self.sockets) or f"cannot connect to {control}: {exc}"
            raise not_running(why, self.sockets) from None
        self.served_by = lock_pid(self.sockets.lock)
        return dealer

    def call(self, op: str, _timeout: float | None = None, **args: Any) -> Any:
        """Send ``op`` with ``args`` and return the result, as
        :meth:`client.connection.Connection.call`; raises :class:`Fallback` when no daemon could be
        reached and nothing was sent yet."""
        protocol.check_ints(args)
        req_id, frame = protocol.encode_request(op, args)
        if len(frame) > protocol.MAX_MESSAGE_BYTES:
            raise too_large(op, args, len(frame))
        if self.dealer is None:
            self.dealer = self._connect()
        wait = self.timeout if _timeout is None else _timeout
        deadline = time.monotonic() + wait
        try:
            self.dealer.send(frame)
            self.sent = True
            while True:
                if not self.dealer.ready(max(0.001, deadline - time.monotonic())):
                    self.close()  # a late reply must not be read as the answer to a later request
                    raise ClientError("timeout", f"hermesd did not answer {op!r} within {wait:g}s "
                                                 f"(socket {self.sockets.control})")
                reply = protocol.decode_reply(self.dealer.recv()[-1])
                if reply.get("id") == req_id:
                    return protocol.raise_for_reply(reply)
        except (OSError, zmtp.WireError):
            self.close()
            why = daemon_gone(self.sockets) or replaced(self.sockets, self.served_by) or "it closed the connection"
            raise ClientError("daemon_not_running", f"hermesd stopped before it answered {op!r} ({why})",
                              lost=True) from None

    def close(self) -> None:
        """Close the connection (a new one is made on the next call)."""
        if self.dealer is not None:
            self.dealer.close()
            self.dealer = None


class FastSession(Session):
    """A :class:`client.verbs.Session` of the fast path: a :class:`Link`, ``--json``, plain writes."""

    def __init__(self, as_json: bool, runtime_dir: str | None, timeout: float):
        self._json = as_json
        self.link = Link(runtime_dir, timeout)

    conn = property(lambda self: self.link)
    json = property(lambda self: self._json)

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """:meth:`client.calls.Calls.wait_job`, never shown live (the fast path leaves a terminal's
        wait to the full client); Ctrl-C says what goes on."""
        try:
            return self.link.wait_job(job_id, timeout, notice=lambda text: self.echo(f"hermesctl: {text}", err=True))
        except KeyboardInterrupt:
            self.stopped_watching(job_id)
            raise  # not reached


NOT_PARSED = object()
"""What :func:`convert` returns for a value click would refuse (or that the fast path leaves to it)."""


def convert(opt: Opt, value: str) -> Any:
    """``value`` of option ``opt`` as click converts it, or :data:`NOT_PARSED`."""
    try:
        if opt.kind in ("int", "int1", "int0"):
            number = int(value)
            return number if opt.kind == "int" or number >= (1 if opt.kind == "int1" else 0) else NOT_PARSED
        if opt.kind in ("float", "float0"):
            real = float(value)
            finite = -1e300 < real < 1e300
            return real if finite and (opt.kind == "float" or real >= 0) else NOT_PARSED
    except ValueError:
        return NOT_PARSED
    if opt.kind == "choice":
        return value if value in opt.choices() else NOT_PARSED
    if opt.kind == "dir":
        return value if os.path.isdir(value) and os.access(value, os.R_OK) else NOT_PARSED
    return value if opt.kind == "str" else NOT_PARSED


GLOBAL_TIMEOUT = Opt("--timeout", "float")
GLOBAL_RUNTIME_DIR = Opt("--runtime-dir")


def parse(argv: list[str]) -> tuple[Verb, dict[str, Any], FastSession] | None:
    """The command, its values and the session of command line ``argv`` (without the program),
    or None when the full client must parse it (see the module doc)."""
    globals_: dict[str, Any] = {"json": False, "timeout": DEFAULT_TIMEOUT,
                                "runtime_dir": os.environ.get("HERMES_RUNTIME_DIR") or None}
    words = iter(argv)
    verb: Verb | None = None
    values: dict[str, Any] = {}
    positional: list[str] = []
    for word in words:
        if verb is None and not word.startswith("-"):
            verb = VERBS.get(word)
            if verb is None:
                return None
            values = {p.dest if isinstance(p, Opt) else p.name: p.default() for p in verb.params}
            continue
        if not word.startswith("-"):
            positional.append(word)
            continue
        flag, eq, value = word.partition("=")
        if flag == "--json" and not eq:
            globals_["json"] = True
            continue
        opt = verb.option(flag) if verb is not None else None
        if opt is None and (flag == "--runtime-dir" and verb is None or flag == "--timeout"):
            opt = GLOBAL_RUNTIME_DIR if flag == "--runtime-dir" else GLOBAL_TIMEOUT
        if opt is None or opt.slow or (opt.kind == "flag" and eq):
            return None
        if opt.kind == "flag":
            values[opt.dest] = True
            continue
        if not eq:
            value = next(words, None)
            if value is None or value.startswith("-"):
                return None
        converted = convert(opt, value)
        if converted is NOT_PARSED:
            return None
        if opt is GLOBAL_TIMEOUT:
            if not converted > 0:
                return None
            globals_["timeout"] = converted
        elif opt is GLOBAL_RUNTIME_DIR:
            if os.path.exists(converted) and not os.path.isdir(converted):
                return None
            globals_["runtime_dir"] = converted
        else:
            values[opt.dest] = values[opt.dest] + (converted,) if opt.multiple else converted
    if verb is None:
        return None
    args = [p for p in verb.params if isinstance(p, Arg)]
    if len(positional) > len(args) or any(a.required for a in args[len(positional):]):
        return None
    values.update((a.name, word) for a, word in zip(args, positional))
    return verb, values, FastSession(globals_["json"], globals_["runtime_dir"], globals_["timeout"])


def run(argv: list[str]) -> bool:
    """Answer ``argv`` here if the fast path can (see the module doc); False: the full client
    must run, nothing having been sent or printed.  Exits as the full client does."""
    if "_HERMESCTL_COMPLETE" in os.environ:
        return False
    parsed = parse(argv)
    if parsed is None:
        return False
    verb, values, session = parsed
    if waits_for_job(verb.name, values) and not session.json and sys.stderr.isatty():
        return False  # shown live on a terminal: the full client's
    try:
        verb.body(session, **values)
    except (Fallback, Usage):
        return False
    except (ClientError, protocol.ProtocolError) as err:
        session.fail(err.code, err.message)
    except KeyboardInterrupt:
        session.echo("", err=True)
        sys.exit(INTERRUPTED)
    except BrokenPipeError:  # the reader left (`| head`): exit 1 without a word, as the full client
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    finally:
        session.link.close()
    return True
