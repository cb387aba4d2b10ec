"""Validation of a batch's input file by the runner, on both databases: a batch is
created `validating` with no line; the runner checks the file and writes its lines a
bounded chunk a transaction, hidden by the batch's state until the last chunk moves it
to `in_progress`. A replica stopped mid-validation leaves only hidden lines, and after a
restart the validation is done again from the start and completes with each line once;
another replica waits for the lease of the one validating; a batch cancelled or failed
mid-validation keeps no line; memory stays bounded by the chunk, not the file."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.deferred.runner import DeferredRunner
from app.deferred.store import DeferredStore
from app.schemas.batches import BatchCreate
from app.services.batches import validation as batch_validation
from app.services.batches.jobs import BatchJobs
from app.services.batches.lines import LineRunner
from app.services.batches.service import BatchService
from app.services.batches.validation import VALIDATE_LEASE_S
from app.storage.database import TenantDatabase
from app.storage.files import FileStore
from tests.unit.app.deferred.test_runner_policy import ScriptedCapacity
from tests.unit.app.deferred.test_store import Clock

CHAT = "/v1/chat/completions"
LINES = 40


class PausedFiles:
    """The real file store, whose reads stop after `after` lines until `go` is set (a
    replica busy validating a large file when it is stopped)."""

    def __init__(self, files: FileStore, after: int) -> None:
        self.files = files
        self.after = after
        self.go = asyncio.Event()
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.files, name)  # the rest of the file store, as it is

    async def lines(self, owner: str, file_id: str) -> AsyncIterator[bytes]:
        async for line in self.files.lines(owner, file_id):
            if self.read == self.after:
                await self.go.wait()
            self.read += 1
            yield line


def _line(i: int) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": str(i)}]}
    return json.dumps({"custom_id": f"c{i}", "method": "POST", "url": CHAT, "body": body}).encode()


def _runner(store: DeferredStore, files: object, replica: str, clock: Clock) -> DeferredRunner:
    handler = BatchJobs(store, files, LineRunner({}), None, replica)  # type: ignore[arg-type]
    return DeferredRunner(
        store, ScriptedCapacity(), [handler], replica=replica, concurrency=0,
        jobs_every_s=0.0, clock=clock,
    )  # fmt: skip


async def until_validated(runner: DeferredRunner, store: DeferredStore, batch_id: str) -> None:
    """Tick `runner` until the batch has left `validating` (a tick waits for a validation
    only so long: a large file on a loaded machine takes several)."""
    for _ in range(200):
        await runner.step()
        job = await store.get(batch_id)
        if job is not None and job.state != "validating":
            return
    raise AssertionError("the batch was still validating")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 8 lines: a file of `LINES` is written in several transactions."""
    monkeypatch.setattr(batch_validation, "STAGE_LINES", 8)


async def _setup(
    database: AsyncEngine, content: bytes | None = None
) -> tuple[DeferredStore, FileStore, str, Clock]:
    clock = Clock()
    url = database.url.render_as_string(hide_password=False)
    tenant = TenantDatabase(url, database)
    store = DeferredStore(tenant, clock)
    files = FileStore(tenant)
    if content is None:
        content = b"\n".join(_line(i) for i in range(LINES)) + b"\n"
    file = await files.create("anonymous", "batch", "in.jsonl", content)
    batch = await BatchService(store, files).create(
        BatchCreate(input_file_id=file.id, endpoint=CHAT, completion_window="24h"), None
    )
    assert batch.status == "validating" and batch.request_counts.total == 0
    return store, files, batch.id, clock


async def test_a_restart_mid_validation_validates_again(database: AsyncEngine) -> None:
    store, files, batch_id, clock = await _setup(database)
    paused = PausedFiles(files, after=LINES // 2)
    first = _runner(store, paused, "r1", clock)
    await first.step()  # the validation starts, reads half the file, waits
    assert paused.read == LINES // 2
    job = await store.get(batch_id)
    assert job is not None and job.state == "validating"
    # Two chunks written, hidden: the batch counts no request yet.
    assert (await store.counts([batch_id]))[batch_id].total == 16
    batch = await BatchService(store, files).get(batch_id, None)
    assert batch.status == "validating" and batch.request_counts.total == 0
    await first.close()  # stopped mid-validation (SIGTERM; kill -9 leaves the same rows)

    # Another replica waits for the lease the first took on the job.
    other = _runner(store, files, "r2", clock)
    await other.step()
    job = await store.get(batch_id)
    assert job is not None and job.state == "validating"

    # The restarted replica (same name) validates again, from the start, and completes.
    restarted = _runner(store, files, "r1", clock)
    await restarted.step()
    job = await store.get(batch_id)
    assert job is not None and job.state == "in_progress", job
    assert {"validating", "in_progress"} <= set(job.stamps)
    counts = (await store.counts([batch_id]))[batch_id]
    assert counts.by_state == {"pending": LINES}
    bodies = [body async for _, _, body, _, _ in store.finished_lines(batch_id)]
    assert [json.loads(body)["custom_id"] for body in bodies] == [f"c{i}" for i in range(LINES)]

    # Validated once: a later tick of the other replica (its lease over) writes nothing.
    clock.now += VALIDATE_LEASE_S + 1
    await other.step()
    assert (await store.counts([batch_id]))[batch_id].total == LINES


async def test_a_dead_validators_lease_runs_out(database: AsyncEngine) -> None:
    store, files, batch_id, clock = await _setup(database)
    paused = PausedFiles(files, after=3)
    dead = _runner(store, paused, "dead", clock)
    await dead.step()
    await dead.close()
    clock.now += VALIDATE_LEASE_S + 1
    survivor = _runner(store, files, "r2", clock)
    await survivor.step()
    job = await store.get(batch_id)
    assert job is not None and job.state == "in_progress"
    assert (await store.counts([batch_id]))[batch_id].total == LINES


async def test_a_file_that_fails_validation_fails_the_batch_as_openai(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    url = database.url.render_as_string(hide_password=False)
    tenant = TenantDatabase(url, database)
    store, files = DeferredStore(tenant, clock), FileStore(tenant)
    wrong_url = json.loads(_line(1))
    wrong_url["url"] = "/v1/completions"
    content = b"\n".join([_line(0), _line(0), json.dumps(wrong_url).encode(), b"{}"])
    file = await files.create("anonymous", "batch", "in.jsonl", content)
    batch = await BatchService(store, files).create(
        BatchCreate(input_file_id=file.id, endpoint=CHAT, completion_window="24h"), None
    )
    await _runner(store, files, "r1", clock).step()
    job = await store.get(batch.id)
    assert job is not None and job.state == "failed" and "failed" in job.stamps
    assert job.result is not None
    errors = [(e["code"], e.get("param"), e["line"]) for e in job.result["errors"]]
    assert errors == [
        ("duplicate_custom_id", "custom_id", 2),
        ("mismatched_url", "url", 3),
        ("invalid_json_line", None, 4),
    ]
    assert (await store.counts([batch.id]))[batch.id].total == 0


async def test_a_batch_cancelled_mid_validation_keeps_no_line(database: AsyncEngine) -> None:
    store, files, batch_id, clock = await _setup(database)
    paused = PausedFiles(files, after=LINES // 2)
    runner = _runner(store, paused, "r1", clock)
    await runner.step()
    assert (await store.counts([batch_id]))[batch_id].total == 16
    service = BatchService(store, files)
    assert (await service.cancel(batch_id, None)).status == "cancelling"
    paused.go.set()  # the validation reads on, and finds its batch cancelled
    for _ in range(3):
        await runner.step()
        await asyncio.sleep(0)
    batch = await service.get(batch_id, None)
    assert batch.status == "cancelled", batch
    assert batch.request_counts.total == 0
    assert (await store.counts([batch_id]))[batch_id].total == 0
    await runner.close()


async def test_a_validation_failing_after_written_chunks_keeps_no_line(
    database: AsyncEngine,
) -> None:
    lines = [_line(i) for i in range(LINES)] + [b"{}"]  # the last line fails
    store, files, batch_id, clock = await _setup(database, b"\n".join(lines))
    await _runner(store, files, "r1", clock).step()
    job = await store.get(batch_id)
    assert job is not None and job.state == "failed"
    assert job.result is not None and job.result["errors"][0]["line"] == LINES + 1
    assert (await store.counts([batch_id]))[batch_id].total == 0


async def test_each_transaction_writes_a_bounded_chunk(database: AsyncEngine) -> None:
    store, files, batch_id, clock = await _setup(database)
    chunks: list[int] = []
    stage = store.stage

    async def counted(*args: Any, **kwargs: Any) -> bool:
        chunks.append(len(args[4]))
        return await stage(*args, **kwargs)

    store.stage = counted  # type: ignore[method-assign]
    await _runner(store, files, "r1", clock).step()
    assert chunks == [8, 8, 8, 8, 8, 0]  # the last, empty, moves the batch
    assert (await store.counts([batch_id]))[batch_id].by_state == {"pending": LINES}


async def test_memory_is_bounded_by_the_chunk_not_the_file(
    database: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_validation, "STAGE_LINES", 500)
    monkeypatch.setattr(batch_validation, "STAGE_BYTES", 1024 * 1024)
    filler = "x" * 16_000
    lines = [
        _line(i).replace(b'"content": "', f'"content": "{filler}'.encode()) for i in range(1000)
    ]
    content = b"\n".join(lines)
    assert len(content) > 16_000_000
    store, files, batch_id, clock = await _setup(database, content)
    tracemalloc.start()
    try:
        runner = _runner(store, files, "r1", clock)
        await until_validated(runner, store, batch_id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (await store.counts([batch_id]))[batch_id].total == 1000
    assert peak < 8 * 1024 * 1024, peak  # the file is 16 MB; a chunk is 1 MiB
