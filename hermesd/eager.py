"""Running a coroutine's first step at once, as Python 3.12's ``asyncio.eager_task_factory`` does.

Most requests are answered without awaiting anything (``status``, ``ps``,
``delegate``: SQLite is synchronous).  A Task per request costs the Task, one
more turn of the event loop before it starts and a ``select`` in between: on a
2-core machine about a tenth of a control round trip (bench/bench_control.py).
:func:`start` runs the coroutine up to its first suspension in the caller; one
that finishes there needs no Task at all; one that suspends is handed, as it
stands, to a Task that goes on from there (:class:`Resumed`).

The first step differs from a Task's in two ways, as in Python 3.12 (the
``asyncio`` docs, "Eager Task Factory"): it runs in the caller's context
(``contextvars``) and with no current task, so ``asyncio.current_task()`` is
None there and ``asyncio.timeout()`` cannot be entered before the first
``await`` that suspends.
"""

from __future__ import annotations

import asyncio
import collections.abc
from typing import Any, Coroutine

_NOTHING = object()


def start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> asyncio.Task | None:
    """Run ``coro`` until it suspends or ends.  Returns None when it ended (its result is
    dropped: ``coro`` does its own reporting), else the Task that goes on with it.  An
    exception raised by the first step propagates to the caller."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return loop.create_task(Resumed(coro, yielded))


class Resumed(collections.abc.Coroutine):
    """``coro``, already suspended on ``yielded`` (what its first ``send(None)`` returned:
    the future it awaits, or None for a bare yield), as a coroutine a Task can drive: the
    Task's first step gets ``yielded``; every later step goes to ``coro``."""

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any):
        self._coro, self._held = coro, yielded
        self.__qualname__ = getattr(coro, "__qualname__", type(coro).__name__)

    def send(self, value: Any) -> Any:
        """The held value on the first call (``value`` is the Task's None), else ``coro.send``."""
        held, self._held = self._held, _NOTHING
        if held is not _NOTHING:
            return held
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Into ``coro``.  Thrown before the first step (the Task cancelled at once), the
        future ``coro`` was waiting on is cancelled too: no Task ever waits on it."""
        held, self._held = self._held, _NOTHING
        if isinstance(held, asyncio.Future):
            held.cancel()
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        """Close ``coro``."""
        self._coro.close()

    def __await__(self):
        raise TypeError("a Resumed coroutine is driven by its Task, not awaited")
