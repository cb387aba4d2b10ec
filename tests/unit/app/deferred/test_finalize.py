"""Finalizing a batch again after a crash (both databases): the output file written
before the crash is found and reused, one left part-written is replaced, and the batch
ends with one output file, never an orphan beside it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import files as files_table
from app.deferred.store import DeferredStore, Job
from app.services.batches.jobs import BatchJobs, result_file_id
from app.services.batches.lines import LineRunner
from app.storage.database import TenantDatabase
from app.storage.files import UPLOADING, FileStore
from tests.unit.app.deferred.test_store import Clock


class Crash(Exception):
    pass


class CrashAfterWrite:
    """The real file store; the process dies right after a result file is written."""

    def __init__(self, files: FileStore) -> None:
        self.files = files

    def __getattr__(self, name: str) -> Any:
        return getattr(self.files, name)

    async def create_from_lines(self, *args: Any, **kwargs: Any) -> Any:
        await self.files.create_from_lines(*args, **kwargs)
        raise Crash


async def _answered_job(database: AsyncEngine) -> tuple[DeferredStore, FileStore, Job]:
    clock = Clock()
    url = database.url.render_as_string(hide_password=False)
    tenant = TenantDatabase(url, database)
    store, files = DeferredStore(tenant, clock), FileStore(tenant)
    job = Job(
        "batch_" + "ab" * 16, "batch", "k1", None, "in_progress",
        {"endpoint": "/v1/completions", "input_file_id": "file-x"}, None, {},
        clock.now, clock.now + 86400,
    )  # fmt: skip
    await store.create(job, ['{"custom_id": "a"}', '{"custom_id": "b"}'])
    for line in await store.claim(job.id, "r1", 2, 60):
        await store.answer(job.id, line.seq, "r1", f'{{"custom_id": "{line.seq}"}}', True, None)
    return store, files, job


async def _output_files(files: FileStore) -> list[str]:
    return [f.id for f in await files.list("k1", "batch_output", None, 100, "asc")]


def _handler(store: DeferredStore, files: Any) -> BatchJobs:
    return BatchJobs(store, files, LineRunner({}), None, "r1")


async def test_finalizing_again_reuses_the_file_written_before_a_crash(
    database: AsyncEngine,
) -> None:
    store, files, job = await _answered_job(database)
    counts = (await store.counts([job.id]))[job.id]
    with pytest.raises(Crash):
        await _handler(store, CrashAfterWrite(files)).finalize(job, counts)
    crashed = await store.get(job.id)
    assert crashed is not None and crashed.state == "finalizing"
    written = await _output_files(files)
    assert written == [result_file_id(job.id, "output")]

    await _handler(store, files).finalize(crashed, counts)
    done = await store.get(job.id)
    assert done is not None and done.state == "completed"
    assert done.result is not None and done.result["output_file_id"] == written[0]
    assert await _output_files(files) == written  # one file: nothing orphaned
    lines = [line async for line in files.lines("k1", written[0])]
    assert len(lines) == 2


async def test_a_part_written_file_is_replaced(database: AsyncEngine) -> None:
    store, files, job = await _answered_job(database)
    file_id = result_file_id(job.id, "output")
    # What kill -9 leaves mid-write: the file's row, still uploading.
    async with database.begin() as conn:
        await conn.execute(
            insert(files_table).values(
                id=file_id, owner="k1", purpose="batch_output", filename="x", bytes=0,
                line_count=0, chunks=0, status=UPLOADING, created_at=0.0, expires_at=None,
            )
        )  # fmt: skip
    counts = (await store.counts([job.id]))[job.id]
    await _handler(store, files).finalize(job, counts)
    done = await store.get(job.id)
    assert done is not None and done.state == "completed"
    assert await _output_files(files) == [file_id]
    assert len([line async for line in files.lines("k1", file_id)]) == 2
