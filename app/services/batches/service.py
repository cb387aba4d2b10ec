"""The Batch API's operations: create, read, list, cancel, and the `batch` object a job
is shown as.

A batch is created `validating` once its request is checked (endpoint, window, metadata,
an input file of the key's with purpose `batch`); the runner then checks every line of
the file and writes them with the move to `in_progress` in one transaction, or fails the
batch with `errors` saying which lines and why, as OpenAI's
(app.services.batches.validation)."""

from __future__ import annotations

import asyncio
import uuid

import msgspec

from app.deferred.runner import DeferredRunner
from app.deferred.store import DeferredStore, Job, LineCounts
from app.errors import APIError, Conflict, InvalidRequest, TooManyRequests
from app.schemas.batches import (
    COMPLETION_WINDOWS,
    FINAL_STATUSES,
    MAX_METADATA_PAIRS,
    WINDOW_SECONDS,
    Batch,
    BatchCreate,
    BatchError,
    BatchErrors,
    BatchList,
    RequestCounts,
)
from app.services.batches.input import BATCH_ENDPOINTS
from app.services.batches.jobs import KIND, Files
from app.tenancy.keys.store import KeyRecord
from app.tenancy.scope import owner_of

INPUT_PURPOSE = "batch"
# The states of a batch not yet ended: what `max_live_batches` bounds per key.
LIVE_STATES = ("validating", "in_progress", "cancelling", "finalizing")
LIVE_RETRY_AFTER_S = 60.0


class BatchNotFound(APIError):
    """No such batch, or another key's (the same answer: ids reveal nothing)."""

    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, batch_id: str) -> None:
        super().__init__(
            f"No batch with id `{batch_id[:128]}`.", param="batch_id", code="batch_not_found"
        )


class TooManyBatches(TooManyRequests):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This key has {limit} batches that have not ended, the most it may have; "
            "create more when one has completed, or cancel one.",
            LIVE_RETRY_AFTER_S,
            "too_many_batches",
        )


class BatchService:
    def __init__(
        self,
        store: DeferredStore,
        files: Files,
        runner: DeferredRunner | None = None,
        max_live: int = 100,
    ) -> None:
        self.store = store
        self.files = files
        self.runner = runner
        self.max_live = max_live
        # Counting a key's live batches and adding one is one step per replica, so that
        # many creations at once cannot all pass the count.
        self._creating = asyncio.Lock()

    async def create(self, request: BatchCreate, key: KeyRecord | None) -> Batch:
        if request.endpoint not in BATCH_ENDPOINTS:
            raise InvalidRequest(
                f"`endpoint` must be one of {', '.join(BATCH_ENDPOINTS)}.", param="endpoint"
            )
        if request.completion_window not in COMPLETION_WINDOWS:
            raise InvalidRequest(
                f"`completion_window` must be one of {', '.join(COMPLETION_WINDOWS)}.",
                param="completion_window",
            )
        if request.metadata is not None and len(request.metadata) > MAX_METADATA_PAIRS:
            raise InvalidRequest(
                f"`metadata` holds at most {MAX_METADATA_PAIRS} pairs.", param="metadata"
            )
        owner = owner_of(key)
        file = await self.files.get(owner, request.input_file_id)  # another's: 404
        purpose = getattr(file, "purpose", INPUT_PURPOSE)
        if purpose != INPUT_PURPOSE:
            raise InvalidRequest(
                f"The input file's purpose is `{purpose}`; a batch needs `batch`.",
                param="input_file_id",
            )
        now = self.store.clock()
        # Created `validating`, without its lines: the runner checks the input file and
        # writes them (app.services.batches.validation).
        job = Job(
            id=f"batch_{uuid.uuid4().hex}",
            kind=KIND,
            owner=owner,
            key_id=key.id if key is not None else None,
            state="validating",
            payload={
                "endpoint": request.endpoint,
                "input_file_id": request.input_file_id,
                "completion_window": request.completion_window,
                "metadata": request.metadata,
            },
            result=None,
            stamps={},
            created_at=now,
            expires_at=now + WINDOW_SECONDS[request.completion_window],
        )
        async with self._creating:
            if await self.store.count_jobs(KIND, owner, LIVE_STATES) >= self.max_live:
                raise TooManyBatches(self.max_live)
            await self.store.create(job, [])
        if self.runner is not None:
            self.runner.wake()
        return wire(job, LineCounts())

    async def get(self, batch_id: str, key: KeyRecord | None) -> Batch:
        job = await self.store.get(batch_id, owner_of(key))
        if job is None or job.kind != KIND:
            raise BatchNotFound(batch_id)
        counts = await self.store.counts([job.id])
        return wire(job, counts[job.id])

    async def list_batches(self, key: KeyRecord | None, after: str | None, limit: int) -> BatchList:
        jobs = await self.store.list_jobs(KIND, owner_of(key), after=after, limit=limit + 1)
        return await self.page(jobs, limit)

    async def page(self, jobs: list[Job], limit: int) -> BatchList:
        more, jobs = len(jobs) > limit, jobs[:limit]
        counts = await self.store.counts([job.id for job in jobs])
        data = [wire(job, counts[job.id]) for job in jobs]
        first = data[0].id if data else None
        last = data[-1].id if data else None
        return BatchList(data=data, first_id=first, last_id=last, has_more=more)

    async def cancel(self, batch_id: str, key: KeyRecord | None) -> Batch:
        job = await self.store.get(batch_id, owner_of(key))
        if job is None or job.kind != KIND:
            raise BatchNotFound(batch_id)
        if job.state in FINAL_STATUSES or job.state == "finalizing":
            if job.state != "cancelled":
                raise Conflict(
                    f"The batch is {job.state}; it can no longer be cancelled.",
                    code="batch_not_cancellable",
                )
        elif job.state != "cancelling":
            await self.store.move(job.id, ("validating", "in_progress"), "cancelling")
            if self.runner is not None:
                self.runner.wake()
        return await self.get(batch_id, key)


def _at(stamps: dict[str, float], state: str) -> int | None:
    value = stamps.get(state)
    return int(value) if value is not None else None


def wire(job: Job, counts: LineCounts) -> Batch:
    """The `batch` object of a job."""
    payload, result = job.payload, job.result or {}
    errors = result.get("errors")
    if "in_progress" not in job.stamps:
        counts = LineCounts()  # the lines a validation writes count once it has passed
    # Every request that will not complete: answered with an error, expired or cancelled.
    failed = counts.total - counts.ok - counts.unfinished
    return Batch(
        id=job.id,
        endpoint=payload["endpoint"],
        errors=BatchErrors([msgspec.convert(e, BatchError) for e in errors]) if errors else None,
        input_file_id=payload["input_file_id"],
        completion_window=payload["completion_window"],
        status=job.state,  # type: ignore[arg-type]  # states are the batch statuses
        output_file_id=result.get("output_file_id"),
        error_file_id=result.get("error_file_id"),
        created_at=int(job.created_at),
        in_progress_at=_at(job.stamps, "in_progress"),
        expires_at=int(job.expires_at) if job.expires_at is not None else None,
        finalizing_at=_at(job.stamps, "finalizing"),
        completed_at=_at(job.stamps, "completed"),
        failed_at=_at(job.stamps, "failed"),
        expired_at=_at(job.stamps, "expired"),
        cancelling_at=_at(job.stamps, "cancelling"),
        cancelled_at=_at(job.stamps, "cancelled"),
        request_counts=RequestCounts(counts.total, counts.ok, failed),
        metadata=payload.get("metadata"),
    )
