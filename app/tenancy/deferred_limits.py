"""A key's deferred work (batch lines, background responses) within the key's tokens per
minute and concurrency.

Deferred work is counted apart from the key's interactive requests, in buckets of the
same sizes: a key's batch can use as much of the engine a minute as its interactive
requests could, and never takes what they need (it waits instead; the runner tries the
key's lines again when its buckets have refilled). Requests per minute do not apply: a
batch of 50,000 lines is one request, its creation. Each replica counts the lines it
runs.
"""

from __future__ import annotations

import time

from app.tenancy.consumes import Consumes
from app.tenancy.keys.store import KeyLimits, KeyRecord
from app.tenancy.limits import Clock, Limiter, RateLimited, Reservation


class OverDeferredLimits(Exception):
    """The key's deferred work is at its limits now: try again in `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DeferredLimits:
    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._limiter = Limiter(clock)

    def hold(self, key: KeyRecord | None, consumes: Consumes) -> Reservation | None:
        """Take what the line `consumes` of the key's deferred work: its slots of the
        key's concurrency and its tokens of the key's tokens per minute (None without a
        key: unlimited), or raise OverDeferredLimits."""
        if key is None:
            return None
        tokens, slots = consumes.tokens, consumes.slots
        limits = KeyLimits(rpm=None, tpm=key.limits.tpm, max_concurrent=key.limits.max_concurrent)
        if limits.tpm is not None and tokens > limits.tpm:
            tokens = limits.tpm  # a line larger than a minute's tokens still runs, alone
        try:
            return self._limiter.admit(key.id, limits, tokens, slots)
        except RateLimited as exc:
            raise OverDeferredLimits(exc.message, exc.retry_after_s) from exc

    def settle(self, reservation: Reservation | None, used_tokens: int) -> None:
        """The line's run ended: its slots back, its tokens counted as used."""
        if reservation is not None:
            self._limiter.settle(reservation, used_tokens)
