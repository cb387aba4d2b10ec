"""Merging several async streams into one, for fan-out (n choices, several prompts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any, TypeVar

T = TypeVar("T")

_DONE = object()


async def merge(
    sources: Sequence[AsyncGenerator[T, None]],
) -> AsyncGenerator[tuple[int, T], None]:
    """Yield (source position, item) as items arrive from any source.

    The first error of any source is raised after the others are stopped; closing
    the merged stream stops (and so aborts) every source still running.
    """
    if len(sources) == 1:
        async with aclosing(sources[0]) as only:
            async for item in only:
                yield 0, item
        return
    # Items, errors and the end marker share one queue: its entries are untyped.
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(position: int, source: AsyncGenerator[T, None]) -> None:
        try:
            async for item in source:
                await queue.put((position, item))
        except BaseException as exc:
            await queue.put((position, exc))
            raise
        finally:
            await queue.put((position, _DONE))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(sources)]
    running = len(tasks)
    try:
        while running:
            position, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                if isinstance(item, asyncio.CancelledError):
                    continue
                raise item
            else:
                yield position, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
