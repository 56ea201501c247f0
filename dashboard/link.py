"""The dashboard's link to hermesd: requests on one connection, the event log followed in a thread.

:class:`Link` serialises requests on one :class:`client.connection.Connection` (not thread-safe)
and answers repeated reads from a short cache shared by every browser (:meth:`Link.cached`), so the
daemon's load does not grow with the number of people watching.  :class:`Feed` follows
``events.sock`` in a thread of its own with a second connection (as ``hermesctl top`` does,
docs/architecture.md "Concurrency in the clients"), hands each event to the :class:`Index` and
tells the page layer which topics changed."""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from client.connection import ClientError, Connection
from dashboard.index import Index
from hermesd.protocol import ProtocolError

BACKLOG_EVENTS = 2000
"""How many past events a fresh dashboard reads after loading the jobs (progress of running batches)."""
PAGE = 200
"""Jobs per ``ps`` request while loading them: small pages keep the daemon's reply, and the memory it
builds it in, small (a 1,000-job page left hermesd ~1.5 MiB larger, bench/bench_dashboard.py)."""


class Link:
    """Requests to one daemon (``runtime_dir``), thread-safe; ``timeout`` seconds per reply."""

    def __init__(self, runtime_dir: str | Path | None, timeout: float = 10.0):
        self.runtime_dir = runtime_dir
        self.conn = Connection(runtime_dir, timeout=timeout)
        self.lock = threading.Lock()
        self.memo: dict[tuple, tuple[float, Any]] = {}

    def call(self, op: str, **args: Any) -> Any:
        """One request.  Raises :class:`ProtocolError` (the daemon's refusal) or :class:`ClientError`."""
        with self.lock:
            try:
                return self.conn.call(op, **args)
            except ClientError:
                self.conn.close()
                raise

    def cached(self, op: str, ttl: float = 1.0, since: int | None = None, **args: Any) -> Any:
        """``op`` answered from the cache when asked within ``ttl`` seconds (reads only) — and, with
        ``since`` (a generation of news, :attr:`dashboard.live.Hub.generation`), only by an answer
        given in that generation."""
        key = (op, since, tuple(sorted((k, repr(v)) for k, v in args.items())))
        now = time.monotonic()
        hit = self.memo.get(key)
        if hit is not None and now - hit[0] < ttl:
            return hit[1]
        value = self.call(op, **args)
        self.memo[key] = (time.monotonic(), value)
        if len(self.memo) > 512:
            self.memo = {k: v for k, v in self.memo.items() if now - v[0] < ttl}
        return value

    def close(self) -> None:
        """Close the connection."""
        with self.lock:
            self.conn.close()


def load_jobs(link: Link, index: Index) -> None:
    """Every kept job into ``index``, newest first, up to its :attr:`Index.limit`."""
    cursor = None
    while len(index.jobs) < index.limit:
        page = link.call("ps", all=True, order="newest", limit=PAGE, **({"cursor": cursor} if cursor else {}))
        index.add(page["jobs"])
        if not page["more"] or page["next"] is None:
            return
        cursor = page["next"]


class Feed:
    """The event log followed in a thread: each event to ``index``, then ``changed(topics, rows)``
    called (in this thread) with the topics it touched and the ids of job rows to redraw.
    :attr:`up` is False while the daemon cannot be reached (:attr:`why` says why); ``on_up()`` is
    called (in this thread) each time it answers after it did not."""

    def __init__(self, runtime_dir: str | Path | None, index: Index, link: Link,
                 changed: Callable[[set[str], set[str]], None], on_up: Callable[[], None] | None = None):
        self.runtime_dir, self.index, self.link, self.changed, self.on_up = runtime_dir, index, link, changed, on_up
        self.stop = threading.Event()
        self.up, self.why = False, "connecting to hermesd"
        self.thread = threading.Thread(target=self.run, name="dashboard-feed", daemon=True)

    def start(self) -> None:
        """Start following."""
        self.thread.start()

    def lost(self, why: str | None) -> None:
        """``Connection.follow``'s news: the daemon is gone (``why``) or back (None)."""
        self.up, self.why = why is None, why or ""
        self.changed({"status"}, set())
        if self.up and self.on_up is not None:
            self.on_up()

    def run(self) -> None:
        """Load the jobs, then follow the events until :meth:`close`; a daemon not yet there is
        waited for."""
        conn = Connection(self.runtime_dir, timeout=10.0)
        while not self.stop.is_set():
            try:
                status = self.link.call("status")
                load_jobs(self.link, self.index)
                self.index.approvals = {r["id"]: r for r in self.link.call("approvals.list")["approvals"]}
                since = max(self.index.last_seq, (status.get("last_seq") or 0) - BACKLOG_EVENTS)
                self.lost(None)
                while not self.stop.is_set():
                    for event in conn.follow(since, stop_after=1.0, lost=self.lost):
                        since = max(since, event.get("seq") or 0)
                        topics, rows = self.index.apply(event)
                        self.changed(topics, rows)
            except (ClientError, ProtocolError, OSError) as exc:
                self.lost(getattr(exc, "message", None) or str(exc) or "hermesd is not running")
                conn.close()
                self.stop.wait(1.0)
            except Exception:  # noqa: BLE001 - a bug here must not end the live updates: said, then again
                traceback.print_exc()
                conn.close()
                self.stop.wait(1.0)
        conn.close()

    def close(self) -> None:
        """Stop following (returns once the thread ended, at most about 2 s)."""
        self.stop.set()
        self.thread.join(5.0)
