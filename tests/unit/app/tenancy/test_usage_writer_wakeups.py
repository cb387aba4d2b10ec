"""The usage writer wakes the process only for work: with nothing queued, spooled or
counted it sleeps without a timer; a refusal counted meanwhile is written within about
a second all the same, and each group commit is counted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.usage_writer import RETRY_S, UsageWriter
from tests.unit.app.tenancy.helpers import refusal_counts, usage_rows
from tests.unit.app.tenancy.test_usage_bounded import record


async def _asleep(writer: UsageWriter) -> None:
    for _ in range(200):
        if writer._wakeup is not None:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the writer never went to sleep")


async def test_an_idle_writer_sets_no_timer_and_a_refusal_is_still_written(
    database: AsyncEngine, tmp_path: Path
) -> None:
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    writer.start()
    await _asleep(writer)
    assert writer._retry is None  # nothing to retry: no wake-up a second
    writer.refuse("key_a", "rate_limit_exceeded", time.time())
    assert writer._retry is not None  # the count is due within a second
    deadline = time.monotonic() + 10 * RETRY_S
    while not await refusal_counts(database) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await refusal_counts(database) == {("key_a", "rate_limit_exceeded"): 1}
    await _asleep(writer)
    assert writer._retry is None  # counted and written: back to sleeping without one
    await writer.close()


async def test_records_that_wait_together_are_one_counted_commit(
    database: AsyncEngine, tmp_path: Path
) -> None:
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    await writer.write(record("first"))
    assert (writer.written, writer.commits) == (1, 1)
    await asyncio.gather(*(writer.write(record(f"many-{i}")) for i in range(20)))
    await writer.close()
    assert writer.written == 21
    assert writer.commits == 2  # the twenty were queued before the writer woke
    assert len(await usage_rows(database)) == 21
