"""The usage writer wakes the process only for work: with nothing queued, spooled or
counted it sleeps without a timer; a refusal counted meanwhile is written within about
a second all the same, and each group commit is counted. Its bookkeeping per commit
costs no disk access: the spool's state is known once looked at, and keys' last use is
written per key, not per record."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.usage.last_use import TOUCH_EVERY_S
from app.tenancy.usage.spool import UsageSpool
from app.tenancy.usage.writer import RETRY_S, UsageWriter
from tests.unit.app.tenancy.helpers import refusal_counts, usage_rows
from tests.unit.app.tenancy.usage.test_usage_bounded import record


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


async def test_the_spool_file_is_looked_at_once_then_known(
    database: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer asks whether the spool holds records before every commit: the disk is
    asked the first time only; appends, rewrites and the removal after a replay keep the
    answer, and an append that fails leaves it to the disk again."""
    spool_file = tmp_path / "usage-spool.jsonl"
    spool = UsageSpool(spool_file)
    looks: list[Path] = []
    exists = Path.exists

    def counted(path: Path, **kwargs: Any) -> bool:
        looks.append(path)
        return exists(path, **kwargs)

    monkeypatch.setattr(Path, "exists", counted)
    assert not spool.has_records() and not spool.has_records()
    assert looks == [spool_file]
    spool.append([record("a"), record("b")])
    assert spool.has_records()
    spool.rewrite([record("b")])
    assert spool.has_records() and len(spool.lines()) == 1
    spool.rewrite([])
    assert not spool.has_records()
    spool.append([record("c")])
    spool.remove()
    assert not spool.has_records() and not spool_file.exists()
    assert looks == [spool_file, spool_file]  # the check just above, not has_records

    def failing(path: Path, lines: list[str]) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("app.tenancy.usage.spool._append_lines", failing)
    with pytest.raises(OSError):
        spool.append([record("d")])
    assert not spool.has_records()  # asked the disk again: nothing was written
    assert looks[-1] == spool_file and len(looks) == 3

    # A spool left by an earlier run is found by a new writer and replayed.
    monkeypatch.undo()
    UsageSpool(spool_file).append([record("left-over")])
    writer = UsageWriter(database, spool_file)
    await writer.write(record("new"))
    await writer.close()
    assert sorted(r.request_id for r in await usage_rows(database)) == ["left-over", "new"]
    assert not spool_file.exists()


class _Touches:
    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []

    async def touch(self, last_used: dict[str, float]) -> None:
        self.calls.append(dict(last_used))


async def test_a_keys_last_use_is_written_once_a_batch_and_at_most_every_30_s(
    database: AsyncEngine, tmp_path: Path
) -> None:
    touches = _Touches()
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl", touches)  # type: ignore[arg-type]
    now = time.time()
    batch = [record(f"a-{i}", key_id="key_a", created_at=now + i) for i in range(3)]
    batch += [record("b-0", key_id="key_b", created_at=now), record("none", key_id=None)]
    await asyncio.gather(*(writer.write(r) for r in batch))
    assert touches.calls == [{"key_a": now + 2, "key_b": now}]  # each key's last record
    await writer.write(record("a-soon", key_id="key_a", created_at=now + TOUCH_EVERY_S))
    assert len(touches.calls) == 1  # under 30 s after the last write: not again
    later = now + 2 + TOUCH_EVERY_S
    await writer.write(record("a-later", key_id="key_a", created_at=later))
    await writer.close()
    assert touches.calls[1:] == [{"key_a": later}]


class _SlowTouches(_Touches):
    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def touch(self, last_used: dict[str, float]) -> None:
        await self.gate.wait()
        await super().touch(last_used)


async def test_requests_have_their_answer_before_the_keys_last_use_is_written(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """A batch of many tenants' rows is answered once it is committed; the keys' last
    use, bookkeeping, is written after (however slowly) and holds up no request."""
    touches = _SlowTouches()
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl", touches)  # type: ignore[arg-type]
    now = time.time()
    batch = [record(f"r-{i}", key_id=f"key-{i}", created_at=now) for i in range(50)]
    await asyncio.wait_for(asyncio.gather(*(writer.write(r) for r in batch)), 10)
    assert sorted(r.request_id for r in await usage_rows(database)) == sorted(
        r.request_id for r in batch
    )
    assert touches.calls == []  # still waiting on the slow bookkeeping
    touches.gate.set()
    await writer.close()
    assert touches.calls == [{f"key-{i}": now for i in range(50)}]
