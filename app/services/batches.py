"""The Batch API's operations: create (with the cheap checks of every line), read,
list, cancel, and the `batch` object a job is shown as.

A batch is created whole or not at all: its lines are checked as they are read from the
input file (JSON, `custom_id` unique, `url` the batch's endpoint, a model the key may
use), then the job and every line are written in one transaction and the batch is
`in_progress`. A file that fails the checks makes a `failed` batch whose `errors` say
which lines and why (as OpenAI's)."""

from __future__ import annotations

import uuid

import msgspec

from app.deferred.runner import DeferredRunner
from app.deferred.store import DeferredStore, Job, LineCounts
from app.errors import APIError, Conflict, InvalidRequest
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
    input_line_decoder,
    line_model_decoder,
)
from app.services.batch_input import BATCH_ENDPOINTS
from app.services.batch_jobs import KIND, Files
from app.storage.database import owner_of
from app.tenancy.keys import KeyRecord

MAX_REPORTED_ERRORS = 100  # a failed batch lists at most this many line errors
INPUT_PURPOSE = "batch"


class BatchNotFound(APIError):
    """No such batch, or another key's (the same answer: ids reveal nothing)."""

    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, batch_id: str) -> None:
        super().__init__(
            f"No batch with id `{batch_id[:128]}`.", param="batch_id", code="batch_not_found"
        )


class BatchService:
    def __init__(
        self, store: DeferredStore, files: Files, runner: DeferredRunner | None = None
    ) -> None:
        self.store = store
        self.files = files
        self.runner = runner

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
        bodies, errors = await self._checked_lines(owner, request, key)
        now = self.store.clock()
        job = Job(
            id=f"batch_{uuid.uuid4().hex}",
            kind=KIND,
            owner=owner,
            key_id=key.id if key is not None else None,
            state="failed" if errors else "in_progress",
            payload={
                "endpoint": request.endpoint,
                "input_file_id": request.input_file_id,
                "completion_window": request.completion_window,
                "metadata": request.metadata,
            },
            result={"errors": [msgspec.to_builtins(e) for e in errors]} if errors else None,
            stamps={"validating": now},
            created_at=now,
            expires_at=now + WINDOW_SECONDS[request.completion_window],
        )
        await self.store.create(job, [] if errors else bodies)
        if self.runner is not None:
            self.runner.wake()
        return wire(job, LineCounts(by_state={"pending": len(bodies)} if not errors else {}))

    async def _checked_lines(
        self, owner: str, request: BatchCreate, key: KeyRecord | None
    ) -> tuple[list[str], list[BatchError]]:
        bodies: list[str] = []
        errors: list[BatchError] = []
        seen: set[str] = set()
        number = 0
        async for raw in self.files.lines(owner, request.input_file_id):
            number += 1
            if not raw.strip():
                continue
            error = _check_line(raw, number, request.endpoint, key, seen)
            if error is not None:
                if len(errors) < MAX_REPORTED_ERRORS:
                    errors.append(error)
                continue
            bodies.append(raw.decode())
        if not bodies and not errors:
            errors.append(BatchError("empty_file", "The input file has no requests."))
        return bodies, errors

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


def _check_line(
    raw: bytes, number: int, endpoint: str, key: KeyRecord | None, seen: set[str]
) -> BatchError | None:
    try:
        entry = input_line_decoder.decode(raw)
        model = line_model_decoder.decode(entry.body).model
    except msgspec.DecodeError as exc:
        return BatchError(
            "invalid_json_line", f"Line {number} is not a valid request: {exc}.", line=number
        )
    if entry.custom_id in seen:
        return BatchError(
            "duplicate_custom_id",
            f"`custom_id` {entry.custom_id[:64]!r} repeats.",
            "custom_id",
            number,
        )
    seen.add(entry.custom_id)
    if entry.url != endpoint:
        return BatchError(
            "mismatched_url",
            f"The line's url is not the batch's endpoint {endpoint}.",
            "url",
            number,
        )
    if entry.method.upper() != "POST":
        return BatchError("invalid_method", "Batch requests use POST.", "method", number)
    if not isinstance(model, str):
        return BatchError(
            "missing_model", "The line's body names no `model`.", "body.model", number
        )
    if key is not None and not key.limits.allows_model(model):
        return BatchError(
            "model_not_found",
            f"The key may not use the model `{model[:256]}`.",
            "body.model",
            number,
        )
    return None


def _at(stamps: dict[str, float], state: str) -> int | None:
    value = stamps.get(state)
    return int(value) if value is not None else None


def wire(job: Job, counts: LineCounts) -> Batch:
    """The `batch` object of a job."""
    payload, result = job.payload, job.result or {}
    errors = result.get("errors")
    failed = counts.by_state.get("answered", 0) - counts.ok + counts.by_state.get("expired", 0)
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
