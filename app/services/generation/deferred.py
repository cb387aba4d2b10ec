"""What every kind of deferred line (a batch line, a background response) shares when
it runs a generation away from its HTTP request: the meter the service fills in, the
usage row the line's answer is billed with, and the request as its key may send it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from app.deferred.work import KeyAtLimits
from app.errors import ModelNotFound
from app.schemas.sampling import SamplingFields
from app.services.generation.admission import clamp_priority
from app.tenancy.consumes import Consumes
from app.tenancy.deferred_limits import DeferredLimits, OverDeferredLimits
from app.tenancy.keys.isolation import cache_salt
from app.tenancy.keys.store import DEFAULT_WEIGHT, KeyRecord
from app.tenancy.usage.records import UsageRecord
from app.usage_source import UsageSource

Request = TypeVar("Request", bound=SamplingFields)


@dataclass(slots=True)
class LineMeter:
    """What a service fills in and finishes for a deferred line: the generation's usage
    (its engine tally is what the line is billed), the model, and the error that ended
    its stream after it began; and what the service reads, the weight of the line's key.
    The usage row is written with the line's answer; a run cut or failed before it is
    billed with the line's release (app.deferred.work.RunBill)."""

    usage_source: UsageSource | None = None
    failure: BaseException | None = None
    model: str = ""
    weight: float = DEFAULT_WEIGHT  # its key's share of the engine (`key_weight`)
    started: float = field(default_factory=time.monotonic)
    wall_start: float = field(default_factory=time.time)

    async def finish(self, exc: BaseException | None = None) -> None:
        self.failure = exc

    def abandon(self, exc: BaseException) -> None:
        """Cut or cancelled: billed by the runner, with the line's answer or release."""


def usage_record(
    meter: LineMeter,
    *,
    key_id: str | None,
    request_id: str,
    model: str,
    endpoint: str,
    outcome: str,
    n: int = 1,
    batch_id: str | None = None,
) -> UsageRecord | None:
    """The line's usage row: what the engine ran for it (None: unmetered, or nothing
    ran). `request_id` is the same on every run of the line."""
    generation = meter.usage_source
    if key_id is None or generation is None:
        return None
    usage = generation.usage()
    first = generation.first_output_at
    return UsageRecord(
        request_id=request_id,
        key_id=key_id,
        model=model,
        endpoint=endpoint,
        prompt_tokens=generation.engine_prompt_tokens,
        cached_tokens=usage.prompt_tokens_details.cached_tokens,
        completion_tokens=generation.engine_completion_tokens,
        reasoning_tokens=usage.completion_tokens_details.reasoning_tokens,
        n=n,
        outcome=outcome,
        queue_ms=None,
        ttft_ms=(first - meter.started) * 1000 if first is not None else None,
        duration_ms=(time.monotonic() - meter.started) * 1000,
        created_at=meter.wall_start,
        batch_id=batch_id,
    )


def key_weight(key: KeyRecord | None) -> float:
    """The weight a line's engine requests carry: its key's (the default without one)."""
    return key.limits.weight if key is not None else DEFAULT_WEIGHT


def as_key(request: Request, key: KeyRecord | None) -> Request:
    """The request as `key` may send it: a model it may use (else 404), its priority
    tier at most, its part of the prefix cache."""
    if key is not None:
        if not key.limits.allows_model(request.model):
            raise ModelNotFound(request.model)
        request.priority = clamp_priority(request.priority, key.limits.priority)
        request.cache_salt = cache_salt(key, request.cache_salt)
    else:
        request.priority = clamp_priority(request.priority)
    return request


@contextmanager
def within_limits(
    limits: DeferredLimits, key: KeyRecord | None, consumes: Consumes, meter: LineMeter
) -> Iterator[None]:
    """Run the line inside its key's deferred limits: what it `consumes` (its tokens,
    the estimate the key's interactive requests reserve, and its slots) held while it
    runs, settled with what the engine used; `KeyAtLimits` (the line not run, its key's
    lines resting) when the key has no room now."""
    try:
        reservation = limits.hold(key, consumes)
    except OverDeferredLimits as exc:
        raise KeyAtLimits(str(exc), exc.retry_after_s) from exc
    try:
        yield
    finally:
        generation = meter.usage_source
        used = 0
        if generation is not None:
            used = generation.engine_prompt_tokens + generation.engine_completion_tokens
        limits.settle(reservation, used)
