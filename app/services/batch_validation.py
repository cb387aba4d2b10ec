"""Validating a batch (its `validating` status), done by the runner after creation: every
line of the input file is checked as it is read (JSON, `custom_id` unique, `url` the
batch's endpoint, `POST`, a model the key may use), then the lines are written and the
batch moves to `in_progress` in one transaction, or to `failed` with the `errors` object
OpenAI returns (the first `MAX_REPORTED_ERRORS` lines that fail, each with its line
number). Nothing is written before that transaction, so a validation cut short (a
restart, a replica that died) is simply done again from the start; the job's lease keeps
two replicas from doing it at once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec

from app.deferred.store import DeferredStore, Job
from app.errors import APIError
from app.schemas.batches import BatchError, input_line_decoder, line_model_decoder
from app.tenancy.keys import KeyRecord

log = logging.getLogger("lilac.batches")

MAX_REPORTED_ERRORS = 100  # a failed batch lists at most this many line errors
VALIDATE_LEASE_S = 30.0  # the job's lease while one replica validates it
RENEW_EVERY_LINES = 2000  # the lease is renewed after this many lines read


async def validate(
    store: DeferredStore,
    job: Job,
    lines: AsyncIterator[bytes],
    key: KeyRecord | None,
    renew: Callable[[], Awaitable[bool]],
) -> bool:
    """Check the job's input `lines`; write them and move the job to `in_progress`, or
    fail it with the errors. False when the job was no longer `validating` (cancelled, or
    validated by another replica) or the lease was lost: nothing changed here."""
    bodies: list[str] = []
    errors: list[BatchError] = []
    seen: set[str] = set()
    endpoint = job.payload["endpoint"]
    number = 0
    try:
        async for raw in lines:
            number += 1
            if number % RENEW_EVERY_LINES == 0 and not await renew():
                return False
            error = check_line(raw, number, endpoint, key, seen)
            if error is None:
                bodies.append(raw.decode())
            elif len(errors) < MAX_REPORTED_ERRORS:
                errors.append(error)
    except APIError as exc:  # the input file was deleted meanwhile
        errors = [BatchError("invalid_file", exc.message, "input_file_id")]
    if not bodies and not errors:
        errors.append(BatchError("empty_file", "The input file has no requests."))
    if errors:
        result = {"errors": [msgspec.to_builtins(error) for error in errors]}
        moved = await store.move(job.id, ("validating",), "failed", result)
        if moved:
            job.state, job.result = "failed", result
        log.info("batch %s failed validation: %d lines in error", job.id, len(errors))
        return moved
    if not await store.populate(job.id, "validating", "in_progress", bodies):
        return False
    job.state = "in_progress"
    return True


def check_line(
    raw: bytes, number: int, endpoint: str, key: KeyRecord | None, seen: set[str]
) -> BatchError | None:
    """What is wrong with the line numbered `number` (its `custom_id` joins `seen`)."""
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
