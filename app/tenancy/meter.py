"""One metered request: its meter, which reads the request's usage when it ends, settles
it against the key's limits and hands the record to the usage writer; and how an
ending (completed, cancelled, refused...) is named in the record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol

from app.errors import ClientDisconnected
from app.errors.handlers import to_api_error
from app.observability import context
from app.tenancy.keys.store import KeyRecord
from app.tenancy.limits import RateLimited, RateLimiter, Reservation
from app.tenancy.usage.records import UsageRecord, day_of
from app.tenancy.usage.writer import UsageWriter
from app.usage_source import UsageSource
from engine.errors import AdmissionRejected, Drained


class Metering(Protocol):
    """What a meter settles with: the key's limits and the usage writer (the app's
    `Tenancy` is one)."""

    @property
    def writer(self) -> UsageWriter | None: ...

    @property
    def limiter(self) -> RateLimiter: ...


def outcome_of(exc: BaseException) -> str:
    # The client left: before its response began (ClientDisconnected), or the server
    # cancelled or closed the stream it was reading.
    if isinstance(exc, asyncio.CancelledError | GeneratorExit | ClientDisconnected):
        return "cancelled"
    if isinstance(exc, Drained):
        return "drained"
    if isinstance(exc, AdmissionRejected | RateLimited):
        return "rejected"
    if isinstance(exc, Exception) and to_api_error(exc).status_code < 500:
        return "rejected"  # refused before generating: a bad request, an unknown model
    return "error"


def refusal_reason(exc: BaseException) -> str:
    """The error code a refused request's client got (`rate_limit_exceeded`,
    `queue_full`, `model_not_found`, ...): the reason its refusal is counted under."""
    if isinstance(exc, RateLimited):
        return "rate_limit_exceeded"
    if isinstance(exc, Exception):
        error = to_api_error(exc)
        return error.code or error.error_type
    return "cancelled"


def is_refusal(record: UsageRecord) -> bool:
    """Refused before anything was generated or read: a count, not a usage row."""
    return (
        record.outcome in ("rejected", "drained")
        and record.prompt_tokens == 0
        and record.completion_tokens == 0
    )


class RequestMeter:
    """One generation request's usage: read from its `generation` when it ends, settled
    against the key's limits, and written, exactly once (`finish` or `abandon`, whichever
    comes first; later calls do nothing).

    The tokens billed are the engine's own count (`Generation.engine_*`, reported through
    each engine request's tally): a prompt counts from the moment the engine took it,
    output tokens as the engine produced them, read by the client or not."""

    __slots__ = (
        "endpoint",
        "http",
        "key",
        "model",
        "n",
        "reservation",
        "settled",
        "started",
        "tenancy",
        "usage_source",
        "wall_start",
    )

    def __init__(
        self, tenancy: Metering, key: KeyRecord, endpoint: str, model: str, n: int
    ) -> None:
        self.tenancy = tenancy
        self.key = key
        self.endpoint = endpoint
        self.model = model
        self.n = n
        self.http = context.current()  # its `queue_s` is admission's wait, once admitted
        self.reservation: Reservation | None = None
        self.usage_source: UsageSource | None = None
        self.settled = False
        self.started = time.monotonic()
        self.wall_start = time.time()

    @property
    def weight(self) -> float:
        """The key's share of the engine against other busy keys'."""
        return self.key.limits.weight

    def record(self, outcome: str) -> UsageRecord:
        prompt = cached = completion = reasoning = 0
        ttft_ms = queue_ms = client_request_id = None
        http = self.http
        if http is not None:
            # The time admission held the request before it ran (app.main's queue-wait
            # observer notes it on the HTTP request's record); None if it never got there.
            if http.queue_s is not None:
                queue_ms = http.queue_s * 1000
            if http.client_supplied:
                client_request_id = http.request_id
        source = self.usage_source
        if source is None:  # refused or gone before a generation: an id of its own
            request_id = context.new_request_id()
        else:
            request_id = source.id  # the response's `id`
            prompt = source.engine_prompt_tokens
            completion = source.engine_completion_tokens
            cached = source.cached_tokens
            reasoning = source.reasoning_tokens
            first = source.first_output_at
            ttft_ms = (first - self.started) * 1000 if first is not None else None
        # Positional, in the order of UsageRecord's fields (made once per metered request).
        return UsageRecord(
            request_id,
            self.key.id,
            self.model,
            self.endpoint,
            prompt,
            cached,
            completion,
            reasoning,
            self.n,
            outcome,
            queue_ms,
            ttft_ms,
            (time.monotonic() - self.started) * 1000,
            self.wall_start,
            day_of(self.wall_start),
            client_request_id,
        )

    def _settle(self, record: UsageRecord) -> bool:
        """True the first time: the caller writes the record."""
        if self.settled:
            return False
        self.settled = True
        writer = self.tenancy.writer
        if writer is not None:
            writer.window.closed()
        if self.reservation is not None:
            used = record.prompt_tokens + record.completion_tokens
            self.tenancy.limiter.settle(self.reservation, used)
        return True

    def finish(self, exc: BaseException | None = None) -> Awaitable[None]:
        """The request ended (`exc` None: completed). What it returns is done once the
        record is durable: the writer's future, not a coroutine around it (one call
        less on every metered request)."""
        record = self.record("completed" if exc is None else outcome_of(exc))
        writer = self.tenancy.writer
        if self._settle(record) and writer is not None:
            if exc is None or not is_refusal(record):
                return writer.write(record)
            writer.refuse(self.key.id, refusal_reason(exc), record.created_at)
        done = asyncio.get_running_loop().create_future()  # nothing to wait for
        done.set_result(None)
        return done

    def abandon(self, exc: BaseException) -> None:
        """The request ended without anyone waiting (cancelled, or failed before its
        response): the record is queued, not awaited; a refusal is only counted."""
        record = self.record(outcome_of(exc))
        if self._settle(record) and self.tenancy.writer is not None:
            if is_refusal(record):
                self.tenancy.writer.refuse(self.key.id, refusal_reason(exc), record.created_at)
            else:
                self.tenancy.writer.submit(record)
