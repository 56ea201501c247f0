"""Live updates: what changed, coalesced and sent to every open page as server-sent events.

The feed thread (:class:`dashboard.link.Feed`) reports topics and job ids; the :class:`Hub` gathers
them on the event loop and every :data:`FLUSH_SECONDS` sends each subscriber one ``refresh``
message (the topics) and one ``rows`` message (the redrawn rows of the jobs it shows), so a page's
updates per second stay bounded whatever the rate of events (HTML's EventSource, WHATWG HTML
§9.2).  While any page is open the Hub tells the daemon a person is watching the approvals
(``approvals.list`` with ``follow``, as ``hermesctl approvals --follow`` does)."""

from __future__ import annotations

import asyncio
import json
import traceback
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

FLUSH_SECONDS = 0.5
FOLLOW_SECONDS = 10.0
KEEPALIVE_SECONDS = 15.0
QUEUE = 64
"""Messages one subscriber may be behind before it is dropped (its EventSource reconnects)."""


@dataclass(eq=False)
class Subscriber:
    """One open page: the filter of the job rows it shows (None: it shows none) and its queue."""

    rows: Callable[[dict[str, Any]], bool] | None
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE))


def message(event: str, data: Any) -> str:
    """One server-sent event (``event:`` and one ``data:`` line of JSON)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class Hub:
    """The open pages and what changed since the last flush.  ``render_row(job id)`` gives
    ``(record, html)`` of a job row (None: gone); ``follow()`` tells the daemon someone watches; ``seq()``
    is the last event the pages know of (a page rendered before it catches up when it subscribes:
    its ``hello`` carries the seq, and the page reloads its live parts when it rendered an older one).
    :attr:`generation` counts the flushes that had news: the daemon's answers are shared between
    pages until the next one (``Link.cached``), so the pages a flush sends fetching again cost the
    daemon one request of each kind, whatever their number; a page shows :attr:`generation_seq`."""

    def __init__(self, render_row: Callable[[str], tuple[dict[str, Any], str] | None], follow: Callable[[], None],
                 seq: Callable[[], int]):
        self.render_row, self.follow, self.seq = render_row, follow, seq
        self.subscribers: set[Subscriber] = set()
        self.topics: set[str] = set()
        self.rows: set[str] = set()
        self.generation, self.generation_seq = 0, 0  # flushes that had news, and the last seq at the last one
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        """Start flushing (on the running loop)."""
        self.loop = asyncio.get_running_loop()
        self.task = self.loop.create_task(self.run())

    def changed(self, topics: set[str], rows: set[str]) -> None:
        """From any thread: ``topics`` and the job ``rows`` changed."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._note, topics, rows)

    def _note(self, topics: set[str], rows: set[str]) -> None:
        self.topics |= topics
        self.rows |= rows

    async def run(self) -> None:
        """Flush every :data:`FLUSH_SECONDS`; tell the daemon about watchers every :data:`FOLLOW_SECONDS`."""
        followed = 0.0
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            now = asyncio.get_running_loop().time()
            if self.subscribers and now - followed >= FOLLOW_SECONDS:
                followed = now
                try:
                    await asyncio.to_thread(self.follow)
                except Exception:  # noqa: BLE001 - the daemon is away: the banner says so
                    pass
            if self.topics or self.rows:  # what the pages read from the daemon from now on is newer
                self.generation, self.generation_seq = self.generation + 1, self.seq()
            if not (self.topics or self.rows) or not self.subscribers:
                self.topics, self.rows = set(), set()
                continue
            topics, rows = sorted(self.topics), sorted(self.rows)
            self.topics, self.rows = set(), set()
            try:  # drawn only when a page shows job rows (the jobs page)
                drawn = [(job, self.render_row(job)) for job in rows[:500]] \
                    if any(sub.rows is not None for sub in self.subscribers) else []
            except Exception:  # noqa: BLE001 - a row that cannot be drawn must not end the live updates
                traceback.print_exc()
                drawn = []
            for sub in list(self.subscribers):
                out = [message("refresh", topics)]
                if sub.rows is not None:
                    mine = [{"id": job, "parent": got[0].get("parent") or got[0].get("session"), "html": got[1]}
                            for job, got in drawn if got is not None and sub.rows(got[0])]
                    if mine:
                        out.append(message("rows", mine))
                for text in out:
                    try:
                        sub.queue.put_nowait(text)
                    except asyncio.QueueFull:
                        self.subscribers.discard(sub)
                        break

    async def stream(self, sub: Subscriber) -> AsyncIterator[str]:
        """The events of one page until it goes (a keep-alive comment when idle)."""
        self.subscribers.add(sub)
        try:
            yield message("hello", {"seq": self.seq()})
            while sub in self.subscribers:
                try:
                    yield await asyncio.wait_for(sub.queue.get(), KEEPALIVE_SECONDS)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"
        finally:
            self.subscribers.discard(sub)
