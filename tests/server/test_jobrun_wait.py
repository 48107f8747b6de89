"""JobEvents' wait for the next event (jobrun._get_within: asyncio.timeout on Python 3.11+, wait_for on
3.10) on a real event loop: an event wakes it, no event is a TimeoutError after the bound (the handler
then looks at its client), and a cancel from outside (the client gone, the server stopping) stays a
cancel, never a timeout the handler would retry, including one that lands as the bound expires; an event
that arrives as the bound expires stays in the queue for the next look."""

from __future__ import annotations

import asyncio

import pytest
from strata.server.jobrun import _get_within


def test_an_event_wakes_the_wait_and_none_is_a_timeout():
    async def run() -> None:
        q: asyncio.Queue = asyncio.Queue()
        asyncio.get_running_loop().call_later(0.01, q.put_nowait, ("done", 1))
        assert await _get_within(q, 60.0) == ("done", 1)
        with pytest.raises(asyncio.TimeoutError):
            await _get_within(q, 0.01)

    asyncio.run(run())


def test_a_cancel_from_outside_stays_a_cancel_and_no_event_is_lost():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        for delay in (0.0, 0.002):          # while waiting; as the bound expires
            for _ in range(50):
                task = asyncio.create_task(_get_within(asyncio.Queue(), 0.002))
                await asyncio.sleep(0)
                cancelled: list[bool] = []
                loop.call_later(delay, lambda t=task, c=cancelled: c.append(t.cancel()))
                try:
                    await task
                except asyncio.CancelledError:
                    assert cancelled == [True]
                except asyncio.TimeoutError:     # only when the wait had ended before the cancel came
                    await asyncio.sleep(delay + 0.01)
                    assert cancelled == [False]
        for _ in range(50):
            q: asyncio.Queue = asyncio.Queue()
            loop.call_later(0.002, q.put_nowait, ("text", "x"))
            try:
                assert await _get_within(q, 0.002) == ("text", "x")
            except asyncio.TimeoutError:
                assert q.get_nowait() == ("text", "x")

    asyncio.run(run())
