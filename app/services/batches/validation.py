"""Validating a batch (its `validating` status), done by the runner after creation: every
line of the input file is checked as it is read (JSON, `custom_id` unique, `url` the
batch's endpoint, `POST`, a model the key may use), then the batch moves to
`in_progress`, or to `failed` with the `errors` object OpenAI returns (the first
`MAX_REPORTED_ERRORS` lines that fail, each with its line number).

Memory and write locks stay bounded whatever the file's size: the lines are written as
they are checked, `STAGE_LINES` (or `STAGE_BYTES`) a transaction, under the job's lease,
and the last chunk moves the job in its own transaction. Until then the job's state
hides them (nothing claims, counts or closes a line of a batch still validating). A
validation cut short (a restart, a replica that died) starts again from the start,
clearing what it had written; one that fails clears its lines before the batch fails. A
line longer than `INLINE_BYTES` is checked off the event loop; `custom_id`s are kept as
16-byte digests."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec

from app.deferred.store import DeferredStore, Job
from app.errors import APIError
from app.schemas.batches import BatchError, input_line_decoder, line_model_decoder
from app.tenancy.keys.store import KeyRecord
from app.transport.request_body import INLINE_BYTES
from engine.offload import off_loop

log = logging.getLogger("lilac.batches")

MAX_REPORTED_ERRORS = 100  # a failed batch lists at most this many line errors
VALIDATE_LEASE_S = 30.0  # the job's lease while one replica validates it (each chunk renews)
STAGE_LINES = 500  # lines written a transaction
STAGE_BYTES = 4 * 1024 * 1024  # or fewer, once their bodies reach this many bytes
VALIDATING, IN_PROGRESS = "validating", "in_progress"


@dataclass(slots=True)
class Staged:
    """The checked lines not yet written, and where the next chunk starts."""

    bodies: list[str] = field(default_factory=list)
    size: int = 0
    next_seq: int = 0

    def add(self, raw: bytes) -> bool:
        """Keep `raw`; whether a chunk is now full."""
        self.bodies.append(raw.decode())
        self.size += len(raw)
        return len(self.bodies) >= STAGE_LINES or self.size >= STAGE_BYTES

    def take(self) -> tuple[int, list[str]]:
        first, bodies = self.next_seq, self.bodies
        self.next_seq += len(bodies)
        self.bodies, self.size = [], 0
        return first, bodies


async def validate(
    store: DeferredStore, job: Job, lines: AsyncIterator[bytes], key: KeyRecord | None, replica: str
) -> bool:
    """Check the job's input `lines`, writing them as they pass; move the job to
    `in_progress`, or fail it with the errors. False when the job was no longer
    `validating` (cancelled, or validated by another replica) or its lease was lost."""
    await store.clear_lines(job.id)  # what a validation cut short had written
    lease = (replica, VALIDATE_LEASE_S)
    staged = Staged()
    errors: list[BatchError] = []
    seen: set[bytes] = set()
    endpoint = job.payload["endpoint"]
    number = 0
    try:
        async for raw in lines:
            number += 1
            error = await _checked(raw, number, endpoint, key, seen)
            if error is not None:
                errors.append(error)
                if len(errors) >= MAX_REPORTED_ERRORS:
                    break
            elif (
                not errors
                and staged.add(raw)
                and not await store.stage(job.id, VALIDATING, lease, *staged.take())
            ):
                return False
    except APIError as exc:  # the input file was deleted meanwhile
        errors = [BatchError("invalid_file", exc.message, "input_file_id")]
    if not errors and staged.next_seq + len(staged.bodies) == 0:
        errors.append(BatchError("empty_file", "The input file has no requests."))
    if errors:
        return await _fail(store, job, errors)
    if not await store.stage(job.id, VALIDATING, lease, *staged.take(), to=IN_PROGRESS):
        return False
    job.state = IN_PROGRESS
    return True


async def _checked(
    raw: bytes, number: int, endpoint: str, key: KeyRecord | None, seen: set[bytes]
) -> BatchError | None:
    if len(raw) <= INLINE_BYTES:
        return check_line(raw, number, endpoint, key, seen)
    return await off_loop(check_line, raw, number, endpoint, key, seen)


async def _fail(store: DeferredStore, job: Job, errors: list[BatchError]) -> bool:
    await store.clear_lines(job.id)
    result = {"errors": [msgspec.to_builtins(error) for error in errors]}
    moved = await store.move(job.id, (VALIDATING,), "failed", result)
    if moved:
        job.state, job.result = "failed", result
    log.info("batch %s failed validation: %d lines in error", job.id, len(errors))
    return moved


def check_line(
    raw: bytes, number: int, endpoint: str, key: KeyRecord | None, seen: set[bytes]
) -> BatchError | None:
    """What is wrong with the line numbered `number` (its `custom_id`'s digest joins
    `seen`)."""
    try:
        entry = input_line_decoder.decode(raw)
        model = line_model_decoder.decode(entry.body).model
    except msgspec.DecodeError as exc:
        return BatchError(
            "invalid_json_line", f"Line {number} is not a valid request: {exc}.", line=number
        )
    digest = hashlib.blake2b(entry.custom_id.encode(), digest_size=16).digest()
    if digest in seen:
        return BatchError(
            "duplicate_custom_id",
            f"`custom_id` {entry.custom_id[:64]!r} repeats.",
            "custom_id",
            number,
        )
    seen.add(digest)
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
