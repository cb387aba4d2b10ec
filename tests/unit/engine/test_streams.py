import asyncio
from collections.abc import AsyncIterator

import pytest

from engine.streams import merge


class Source:
    def __init__(self, items: list[int], delay: float = 0.0, fail: bool = False) -> None:
        self.items, self.delay, self.fail = items, delay, fail
        self.closed = False

    async def run(self) -> AsyncIterator[int]:
        try:
            for item in self.items:
                await asyncio.sleep(self.delay)
                yield item
            if self.fail:
                raise ValueError("boom")
        finally:
            self.closed = True


async def test_merge_tags_items_with_their_source() -> None:
    got = [pair async for pair in merge([Source([1, 2]).run(), Source([3]).run()])]
    assert sorted(got) == [(0, 1), (0, 2), (1, 3)]


async def test_merge_raises_the_first_error_and_stops_the_rest() -> None:
    slow = Source(list(range(100)), delay=0.01)
    with pytest.raises(ValueError, match="boom"):
        async for _ in merge([Source([1], fail=True).run(), slow.run()]):
            pass
    assert slow.closed


@pytest.mark.parametrize("count", [1, 3])
async def test_closing_the_merge_closes_every_source(count: int) -> None:
    sources = [Source(list(range(100)), delay=0.01) for _ in range(count)]
    merged = merge([s.run() for s in sources])
    await anext(merged)
    await merged.aclose()
    assert all(s.closed for s in sources)
