"""hermesd.eager: a request's coroutine runs at once, and in a Task only from its first suspension."""

from __future__ import annotations

import asyncio

import pytest

from hermesd import eager


def run(coro_fn):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


def test_a_coroutine_that_never_suspends_ends_in_the_caller_without_a_task():
    seen = []

    async def answer():
        seen.append("ran")
        return 1

    async def main(loop):
        assert eager.start(loop, answer()) is None
        assert seen == ["ran"]  # before start() returned
        assert asyncio.all_tasks(loop) == {asyncio.current_task(loop)}

    run(main)


def test_a_coroutine_that_suspends_goes_on_in_a_task_with_what_it_awaited():
    seen = []

    async def answer(fut):
        seen.append("first")
        value = await fut
        await asyncio.sleep(0)  # a bare yield
        seen.append(value)
        return value * 2

    async def main(loop):
        fut = loop.create_future()
        task = eager.start(loop, answer(fut))
        assert seen == ["first"] and not task.done()
        loop.call_later(0.01, fut.set_result, 21)
        assert await asyncio.wait_for(task, 5) == 42
        assert seen == ["first", 21]

    run(main)


def test_errors_reach_the_coroutine_and_its_task():
    async def answer(fut):
        try:
            await fut
        except KeyError:
            raise ValueError("handled, then failed") from None

    async def boom():
        raise RuntimeError("at once")

    async def main(loop):
        with pytest.raises(RuntimeError, match="at once"):
            eager.start(loop, boom())  # the first step's error is the caller's
        fut = loop.create_future()
        task = eager.start(loop, answer(fut))
        fut.set_exception(KeyError("x"))
        with pytest.raises(ValueError, match="handled, then failed"):
            await task

    run(main)


def test_cancelled_before_its_first_step_the_awaited_future_is_cancelled_too():
    cleaned = []

    async def answer(fut):
        try:
            await fut
        finally:
            cleaned.append(True)

    async def main(loop):
        fut = loop.create_future()
        task = eager.start(loop, answer(fut))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fut.cancelled() and cleaned == [True]

    run(main)
