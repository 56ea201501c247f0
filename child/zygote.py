"""The zygote: ``python -m child.zygote FD MODULES ROOM`` — a warm template that forks children.

Started by the daemon (:mod:`hermesd.warm.client`) when
``supervisor.start_method`` is ``forkserver`` (the default).  It imports the
child runtime once (:data:`PRELOAD`) with the SDKs of the providers its jobs
will use (:func:`preload_for`: those the daemon's config names, else the
default one; one more when a job uses another), freezes those
objects out of the garbage collector (so that forked children share their
pages copy-on-write), then forks :data:`hermesd.warm.wire.SPARES` spares
(:mod:`child.spare`) and sends each to the daemon over the socket ``FD``.

Forks cost milliseconds (a page-table copy of the zygote; the Anthropic SDK
alone is 60 of its 100 MB, hence only the SDKs in use), so the
spares are forked ahead of time; the daemon holds them and hands a job to one
with a single write.  For each spare it uses the daemon asks for a
replacement (``{"fork": 1, "held": n}``); a used spare is replaced
:data:`REPLENISH_DELAY` after the daemon asked while it still holds another (so
that the fork does not compete with the child just started), at once when it
holds none.  A spare sent to the daemon no longer needs the zygote: it
outlives it, and exits when the daemon closes its pipe or dies (lifeline).

``/proc/PID/environ`` needs care: the kernel shows the memory area the
environment had at ``exec`` time — in a forked child, the *zygote's*.  Leftover
sweeps find a job's processes by ``HERMES_SUPERVISOR`` / ``HERMES_JOB_ID`` in
that view, so the daemon starts the zygote with a large padding variable
(:data:`hermesd.warm.wire.ROOM_ENV`) and each child writes its own environment
into that area (:func:`child.spare.publish_environ`).  The zygote itself has no
``HERMES_SUPERVISOR``: it is no job's process, and it dies with the daemon
(``PDEATHSIG``).  ``SPT_NOENV=1`` keeps setproctitle from using the area for
the title (the title fits in the zygote's long command line).

The wire (messages and their order) is :mod:`hermesd.warm.wire`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import signal
import socket
import sys
import time

from child.spare import Spare, arm_lifeline, title
from hermesd.contract.providers import provider_entry
from hermesd.warm.wire import BASE_URL_ENV, PROVIDERS_ENV, SPARES, recv_msg, send_msg

PRELOAD = ("zmq", "msgpack", "psutil", "setproctitle", "child.__main__", "child.channel", "child.agent",
           "child.messages", "child.trajectory", "child.tools.registry", "child.tools.terminal", "child.tools.files",
           "child.tools.web", "child.tools.delegation", "child.tools.kanban", "child.providers.select",
           "child.providers.scripted")
"""The child runtime: modules the zygote always imports before it says ready (missing ones are skipped)."""
READY_LINE = "warm and ready"
"""Printed by the zygote on the daemon's stderr once it is warm."""
REPLENISH_DELAY = 0.05
"""Seconds from the daemon's request until a used spare is replaced, while it holds
another: the fork then does not compete for the CPU with the child just handed out
(measured on 2 cores: at once, request -> hello 4 ms became 7 ms)."""


def preload_for(providers: str, base_url: str | None) -> tuple[str, ...]:
    """:data:`PRELOAD` plus the SDKs of ``providers`` (comma-separated names, as the daemon's
    config gives them; aliases allowed), or, when it names none, of the provider a job
    without one gets (:func:`child.providers.select.default_provider`)."""
    from child.providers.select import ProviderError, default_provider

    names = [n for n in providers.split(",") if n.strip()]
    if not names:
        try:
            names = [default_provider(base_url)]
        except ProviderError:
            names = []
    entries = [e for e in map(provider_entry, names) if e is not None]
    return PRELOAD + tuple(dict.fromkeys(m for e in entries for m in e.preload))


def warm_up(preload: tuple[str, ...]) -> list[str]:
    """Import ``preload`` and run the ``warm_template()`` of each module of it that has one (a
    provider building a client once, so children share it); returns the names that failed
    (optional SDKs may be absent)."""
    failed = []
    for name in preload:
        try:
            module = importlib.import_module(name)
            warm = getattr(module, "warm_template", None)
            if callable(warm):
                warm()
        except Exception:  # noqa: BLE001 - an optional module; the child imports it itself if needed
            failed.append(name)
    import gc

    gc.collect()
    gc.freeze()  # keep the collector's writes off the shared pages
    return failed


def serve(fd: int, preload: tuple[str, ...]) -> int:
    """The zygote's loop: warm up, fork spares, say ready, send each spare to the daemon,
    and fork one more per ``{"fork": n}`` the daemon sends (:data:`REPLENISH_DELAY` after
    the first one owed while the daemon still ``held`` spares, at once otherwise)."""
    started = time.monotonic()
    arm_lifeline(signal.SIGKILL)
    title("hermes-zygote (warming up)")
    sock = socket.socket(fileno=fd)
    failed = warm_up(preload)
    title("hermes-zygote")
    first = []
    for _ in range(SPARES):
        with contextlib.suppress(OSError):  # no spare now: the daemon asks again
            first.append(Spare.fork(sock))
    seconds = time.monotonic() - started
    send_msg(sock, {"ready": True, "pid": os.getpid(), "seconds": seconds, "failed": failed})
    print(f"hermes-zygote[{os.getpid()}]: {READY_LINE} in {seconds:.2f}s (not imported: {', '.join(failed) or 'none'})",
          file=sys.stderr, flush=True)
    for spare in first:
        spare.send(sock)
    wanted, due = SPARES - len(first), 0.0
    while True:
        if wanted and not select.select([sock], [], [], max(0.0, due - time.monotonic()))[0]:
            wanted -= 1
            try:
                spare = Spare.fork(sock)
            except OSError as exc:
                send_msg(sock, {"errno": exc.errno or 0, "error": f"fork failed: {exc}"})
                continue
            spare.send(sock)
            continue
        got = recv_msg(sock)
        if got is None:
            return 0
        msg, fds = got
        for extra in fds:
            os.close(extra)
        if isinstance(msg, dict) and msg.get("preload"):
            warm_up(preload_for(str(msg["preload"]), None)[len(PRELOAD):])  # in the spares forked from now on
            continue
        if isinstance(msg, dict):
            more = int(msg.get("fork") or 0)
            if not msg.get("held"):  # the daemon holds none: fork at once
                due = time.monotonic()
            elif more and not wanted:  # the first spare owed sets the time
                due = time.monotonic() + REPLENISH_DELAY
            wanted += more


def main(argv: list[str] | None = None) -> int:
    """``python -m child.zygote FD [MODULE,MODULE… [ROOM]]`` — run by hermesd only.

    ``FD``: the socket to the daemon; ``MODULES``: what to preload (``-`` or none:
    :func:`preload_for` the providers in :data:`~hermesd.warm.wire.PROVIDERS_ENV`;
    ``+MODULE,MODULE…``: those and the listed modules; otherwise the listed modules only);
    ``ROOM``: padding, ignored (:data:`hermesd.warm.wire.TITLE_ROOM`).
    """
    argv = sys.argv[1:] if argv is None else argv
    modules = argv[1] if len(argv) > 1 else "-"
    if modules != "-" and not modules.startswith("+"):
        preload = tuple(filter(None, modules.split(",")))
    else:
        preload = preload_for(os.environ.get(PROVIDERS_ENV, ""), os.environ.get(BASE_URL_ENV) or None)
        preload += tuple(filter(None, modules.lstrip("+-").split(",")))
    return serve(int(argv[0]), preload)


if __name__ == "__main__":
    sys.exit(main())
