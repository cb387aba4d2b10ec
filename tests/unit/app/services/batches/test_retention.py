"""The retention purge on a real SQLite file and a real PostgreSQL server: a batch ended
longer than the retention ago goes with its lines and its output and error files (the
lines a bounded number a transaction); a batch still running stays, and so does its
input file past its expiry, until the batch has ended."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.deferred import deferred_jobs, deferred_lines
from app.deferred.store import DeferredStore, Job
from app.errors import FileNotFound
from app.services.batches.retention import Purged, RetentionPurge
from app.storage.files import FileStore
from tests.unit.app.storage.test_file_purge import DAY, Clock, deleted_per_statement
from tests.unit.app.storage.test_files import collect, store_on
from tests.unit.app.tenancy.conftest import database

__all__ = ["database"]

RETENTION = 30 * DAY


async def batch(
    jobs: DeferredStore, job_id: str, state: str, input_id: str, lines: int, **result: str
) -> None:
    job = Job(
        id=job_id,
        kind="batch",
        owner="alice",
        key_id=None,
        state=state,
        payload={"input_file_id": input_id, "endpoint": "/v1/chat/completions"},
        result=dict(result),
        stamps={},
        created_at=jobs.clock(),
        expires_at=None,
    )
    await jobs.create(job, ["{}"] * lines)


async def counts(database: AsyncEngine, job_id: str) -> tuple[int, int]:
    async with database.connect() as conn:
        job = select(func.count()).select_from(deferred_jobs).where(deferred_jobs.c.id == job_id)
        lines = select(func.count()).select_from(deferred_lines)
        lines = lines.where(deferred_lines.c.job_id == job_id)
        return (await conn.execute(job)).scalar_one(), (await conn.execute(lines)).scalar_one()


async def read(store: FileStore, file_id: str) -> bytes:
    return b"".join(await collect(store.content("alice", file_id)))


async def test_ended_batches_go_after_retention_and_running_ones_stay(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    files = store_on(database, clock)
    jobs = DeferredStore(files.database, clock=clock)
    purge = RetentionPurge(files.database, RETENTION, clock=clock, lines_per_step=4)
    done_input = await files.create("alice", "batch", "in.jsonl", b"{}\n", expires_after_s=3600)
    running_input = await files.create("alice", "batch", "in2.jsonl", b"{}\n", expires_after_s=3600)
    output = await files.create("alice", "batch_output", "out.jsonl", b"{}\n")
    errors = await files.create("alice", "batch_output", "err.jsonl", b"{}\n")
    await batch(jobs, "batch_done", "completed", done_input.id, 10,
                output_file_id=output.id, error_file_id=errors.id)  # fmt: skip
    await batch(jobs, "batch_running", "in_progress", running_input.id, 3)

    clock.now += RETENTION - 1  # not yet: only the ended batch's expired input goes
    assert await purge.purge(clock.now) == Purged(batches=0, files=1)
    assert await counts(database, "batch_done") == (1, 10)
    assert await read(files, output.id) == b"{}\n"

    clock.now += 2
    with deleted_per_statement(database) as deleted:
        purged = await purge.purge(clock.now)
    assert purged == Purged(batches=1, files=2)  # with its output and error files
    assert max(deleted) <= 4
    assert await counts(database, "batch_done") == (0, 0)
    for gone in (output.id, errors.id, done_input.id):
        try:
            await files.get("alice", gone)
            raise AssertionError(f"{gone} is still there")
        except FileNotFound:
            pass
    # The running batch and its input, expired long ago, stay: the batch still reads it.
    assert await counts(database, "batch_running") == (1, 3)
    assert await collect(files.lines("alice", running_input.id)) == [b"{}"]

    assert await jobs.move("batch_running", ("in_progress",), "failed")
    assert (await purge.purge(clock.now)).files == 1  # ended: its input goes
    assert await counts(database, "batch_running") == (1, 3)  # kept for the retention
    clock.now += RETENTION + 1
    assert (await purge.purge(clock.now)).batches == 1
    assert await counts(database, "batch_running") == (0, 0)


async def test_no_retention_keeps_batches(database: AsyncEngine) -> None:
    clock = Clock()
    files = store_on(database, clock)
    jobs = DeferredStore(files.database, clock=clock)
    await batch(jobs, "batch_done", "completed", "file-x", 2)
    clock.now += 1000 * DAY
    assert (await RetentionPurge(files.database, 0, clock=clock).purge(clock.now)).batches == 0
    assert await counts(database, "batch_done") == (1, 2)
