"""The client side of :mod:`bench.bench_peers`, one definition for hermesd, circus and supervisord.

The loops (:func:`round_trips`, :func:`per_second`, :func:`starts`) take a
``call`` (one request, its reply awaited) and are used as they are for
hermesd, inside the benchmark's process.  For circus and supervisord this file
runs as a script with the peers' virtual environment's Python (their client
libraries live there, not in hermesd's)::

    PEERS/bin/python bench/peer_driver.py circus ipc:///tmp/x/circus.sock '{"rtt": 2000, "rps": 3, "starts": 40}'
    PEERS/bin/python bench/peer_driver.py supervisord unix:///tmp/x/supervisor.sock '{...}'

and prints one JSON object: ``{"rtt": [seconds…], "rps": requests_per_second,
"refused": n, "starts": [seconds…]}``.  Each peer is asked what its command
line's ``status`` asks: circus ``status`` over its ZeroMQ client
(``circus.client.CircusClient``, the library ``circusctl`` uses), supervisord
``supervisor.getAllProcessInfo`` over XML-RPC on its unix socket
(``supervisor.xmlrpc.SupervisorTransport``, as ``supervisorctl``; one
HTTP/1.1 connection kept open).  A start is the peer's own start request of
the stopped program ``probe`` (``/bin/sleep 3600``), waited for as its
command line waits (circus ``start`` with ``waiting``: the reply comes once
the process was spawned, i.e. exec'd; supervisord ``startProcess(name,
wait=True)`` with ``startsecs=0``: once it is ``RUNNING``); the stop that
follows each start is not timed.  Only the standard library is imported at
module level.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable


def round_trips(call: Callable[[], Any], count: int) -> list[float]:
    """Seconds of ``count`` sequential ``call()`` (after one untimed warm-up call)."""
    call()
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times


def per_second(call: Callable[[], Any], seconds: float, busy: Callable[[BaseException], bool]) -> tuple[float, int]:
    """Calls per second of ``call()`` back to back for ``seconds``, and how many were
    refused (``busy(error)`` true for an error that means the server refused the request)."""
    done = refused = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        try:
            call()
        except Exception as exc:
            if not busy(exc):
                raise
            refused += 1
        done += 1
    return (done - refused) / (time.perf_counter() - t0), refused


def starts(start: Callable[[], Any], stop: Callable[[], Any], count: int) -> list[float]:
    """Seconds of ``count`` ``start()`` each followed by an untimed ``stop()`` (one untimed round first)."""
    start()
    stop()
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        start()
        times.append(time.perf_counter() - t0)
        stop()
    return times


def _circus(endpoint: str) -> tuple[Callable, Callable, Callable]:
    from circus.client import CircusClient

    client = CircusClient(endpoint=endpoint, timeout=30)

    def command(verb: str, **props: Any) -> Any:
        reply = client.call({"command": verb, "properties": props})
        if reply.get("status") != "ok":
            raise RuntimeError(f"circus {verb}: {reply}")
        return reply

    return (lambda: command("status"), lambda: command("start", name="probe", waiting=True),
            lambda: command("stop", name="probe", waiting=True))


def _supervisord(url: str) -> tuple[Callable, Callable, Callable]:
    import xmlrpc.client

    from supervisor.xmlrpc import SupervisorTransport

    proxy = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=SupervisorTransport(None, None, url))
    rpc = proxy.supervisor
    return (rpc.getAllProcessInfo, lambda: rpc.startProcess("probe", True), lambda: rpc.stopProcess("probe", True))


def main() -> None:
    """``peer_driver.py circus|supervisord ENDPOINT '{"rtt": N, "rps": SECONDS, "starts": N}'``."""
    kind, endpoint, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    status, start, stop = (_circus if kind == "circus" else _supervisord)(endpoint)
    rtt = round_trips(status, plan["rtt"])
    rps, refused = per_second(status, plan["rps"], lambda exc: False)
    print(json.dumps({"rtt": rtt, "rps": rps, "refused": refused, "starts": starts(start, stop, plan["starts"])}))


if __name__ == "__main__":
    main()
