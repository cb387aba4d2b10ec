"""Writing a file's content as chunks of one size, whatever the sizes it comes in."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable

from app.storage.lines import LineCounter


async def write_regrouped(
    chunks: AsyncIterable[bytes], chunk_bytes: int, write: Callable[[int, bytes], Awaitable[None]]
) -> tuple[int, int, int]:
    """`chunks` regrouped into pieces of `chunk_bytes` (the last shorter), each handed to
    `write(seq, data)`; (bytes, non-blank lines, pieces written). Each byte is copied
    once into the piece being filled."""
    counter = LineCounter()
    filling = bytearray()
    size = seq = 0
    async for chunk in chunks:
        counter.feed(chunk)
        size += len(chunk)
        view, offset = memoryview(chunk), 0
        while len(filling) + len(view) - offset >= chunk_bytes:
            take = chunk_bytes - len(filling)
            filling += view[offset : offset + take]
            offset += take
            await write(seq, bytes(filling))
            seq += 1
            filling = bytearray()
        filling += view[offset:]
    if filling:
        await write(seq, bytes(filling))
        seq += 1
    return size, counter.finish(), seq
