"""The live feed between a run and its streaming client: backpressure, never loss."""

from __future__ import annotations

import asyncio

from hutch.service.runs import Feed


def test_feed_waits_for_its_reader_and_drops_only_once_closed() -> None:
    async def go() -> None:
        feed = Feed(limit=10)
        await feed.put(("stdout", b"x" * 8))
        second = asyncio.create_task(feed.put(("stdout", b"y" * 8)))
        await asyncio.sleep(0)
        assert not second.done()  # full: the writer waits (the run waits with it)
        assert await feed.get() == ("stdout", b"x" * 8)
        await asyncio.wait_for(second, 5)
        huge = asyncio.create_task(feed.put(("stderr", b"z" * 100)))  # over the limit: it goes once the feed is empty
        await asyncio.sleep(0)
        assert not huge.done()
        assert await feed.get() == ("stdout", b"y" * 8)
        await asyncio.wait_for(huge, 5)
        assert await feed.get() == ("stderr", b"z" * 100)
        feed_full = asyncio.create_task(feed.put(("stdout", b"a" * 10)))
        await asyncio.wait_for(feed_full, 5)
        waiting = asyncio.create_task(feed.put(("stdout", b"b")))
        await asyncio.sleep(0)
        assert not waiting.done()
        feed.close()  # the client left: writers are released, and later chunks are dropped
        await asyncio.wait_for(waiting, 5)
        await feed.put(("stdout", b"c"))
        assert feed.empty()

    asyncio.run(go())
