"""Per-key limits: requests and tokens per minute (token buckets), concurrent requests.

A request takes as many concurrency slots as it has prompts (a completion of 64
prompts is 64 engine requests, and 64 admission tickets); its `n` choices share each
prompt's slot and count in its tokens. One request is one of RPM whatever it holds.

Buckets refill continuously (a limit of 60 per minute gives one back each second) and
run on `time.monotonic`: setting the wall clock back or forward neither refills nor
drains them. This limiter counts in one server process; replicas that share a
PostgreSQL keys database count together (app.tenancy.fleet.limits).
A limit of 0 refuses every request; None means unlimited.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from app.tenancy.keys.store import KeyLimits

Clock = Callable[[], float]


class RateLimited(Exception):
    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.message = message
        # A limit that can never be met (0, or a request over the whole limit) still
        # says a finite time: a minute, the window the limit is counted over.
        self.retry_after_s = min(retry_after_s, 60.0)


# The header names of each bucket, encoded once (they go on every keyed response).
_REQUESTS = tuple(b"x-ratelimit-%s-requests" % part for part in (b"limit", b"remaining", b"reset"))
_TOKENS = tuple(b"x-ratelimit-%s-tokens" % part for part in (b"limit", b"remaining", b"reset"))


class Bucket:
    """`capacity` units, refilled at capacity per minute; `names` are its limit,
    remaining and reset headers."""

    __slots__ = (
        "capacity",
        "level",
        "limit_header",
        "rate",
        "remaining_name",
        "reset_name",
        "stamp",
    )

    def __init__(self, capacity: int, now: float, names: tuple[bytes, ...]) -> None:
        self.capacity = capacity
        self.rate = capacity / 60.0
        self.level = float(capacity)
        self.stamp = now
        # The limit header never changes: made once, sent on every keyed response.
        self.limit_header = (names[0], b"%d" % capacity)
        self.remaining_name, self.reset_name = names[1], names[2]

    def refill(self, now: float) -> None:
        elapsed = now - self.stamp
        if elapsed > 0:
            self.level = min(self.capacity, self.level + elapsed * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is available (inf when it never will be)."""
        if self.level >= amount:
            return 0.0
        if self.rate <= 0 or amount > self.capacity:
            return math.inf
        return (amount - self.level) / self.rate


@dataclass(slots=True)
class Reservation:
    """What one admitted request holds: its reserved tokens (settled at the end)."""

    key_id: str
    tokens: int
    slots: int = 1  # concurrency slots: the request's prompts
    settled: bool = False
    # The key's x-ratelimit-* headers as this admission left them, for the response
    # (None: the limiter leaves them to `headers`, at the response's start).
    headers: list[tuple[bytes, bytes]] | None = None


class InFlight(Protocol):
    """A key's count of concurrency slots in flight (this process's or its fleet slice's)."""

    in_flight: int


S = TypeVar("S", bound=InFlight)


def give_back_slots(keys: Mapping[str, S], reservation: Reservation) -> S | None:
    """Settle `reservation` once: its slots go back to its key. The key's state, for its
    tokens to be settled too; None when settled already or the key is forgotten."""
    if reservation.settled:
        return None
    reservation.settled = True
    state = keys.get(reservation.key_id)
    if state is None:
        return None
    state.in_flight = max(0, state.in_flight - reservation.slots)
    return state


class RateLimiter(Protocol):
    """What tenancy asks of a limiter: this process's (`Limiter`) or the fleet's.
    `admit_now` answers without waiting (a plain call on every metered request), or
    None when only `acquire`, which may wait for the other replicas, can."""

    def admit_now(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1
    ) -> Reservation | None: ...

    async def acquire(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1
    ) -> Reservation: ...

    async def acquire_request(self, key_id: str, limits: KeyLimits) -> None: ...

    def settle(self, reservation: Reservation, used_tokens: int) -> None: ...

    def headers(self, key_id: str, limits: KeyLimits) -> list[tuple[bytes, bytes]]: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class KeyState:
    __slots__ = (
        "_headers",
        "_headers_levels",
        "buckets",
        "in_flight",
        "limits",
        "requests",
        "tokens",
    )

    def __init__(self, limits: KeyLimits, now: float) -> None:
        self.limits = limits
        self.requests = Bucket(limits.rpm, now, _REQUESTS) if limits.rpm is not None else None
        self.tokens = Bucket(limits.tpm, now, _TOKENS) if limits.tpm is not None else None
        self.buckets = tuple(b for b in (self.requests, self.tokens) if b is not None)
        self.in_flight = 0
        # The last headers made, and the buckets' levels they were made from.
        self._headers: list[tuple[bytes, bytes]] = []
        self._headers_levels: tuple[float | None, float | None] = (None, None)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Each bucket's limit, remaining and reset (until full again) headers, as of the
        buckets' last refill. A key under its limits finds its buckets full at each
        request, so it sends the same headers each time: the last list is given again
        while the levels are the ones it was made from (callers never change it)."""
        requests, tokens = self.requests, self.tokens
        levels = (
            None if requests is None else requests.level,
            None if tokens is None else tokens.level,
        )
        if levels == self._headers_levels:
            return self._headers
        self._headers = headers = self._made_headers()
        self._headers_levels = levels
        return headers

    def _made_headers(self) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        for bucket in self.buckets:
            level, rate = bucket.level, bucket.rate
            missing = bucket.capacity - level
            out += (
                bucket.limit_header,
                (bucket.remaining_name, b"%d" % level if level >= 1 else b"0"),
                (bucket.reset_name, duration(missing / rate) if missing > 0 < rate else b"0ms"),
            )
        return out


class Limiter:
    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._keys: dict[str, KeyState] = {}

    def _state(self, key_id: str, limits: KeyLimits, now: float) -> KeyState:
        state = self._keys.get(key_id)
        if state is not None and state.limits is limits:  # the cached key's: most calls
            return state
        # New, or its limits were changed; else the same limits in a record the key
        # cache read again (each second): kept, so the next calls find it the same object.
        if state is None or state.limits != limits:
            state = KeyState(limits, now)
            self._keys[key_id] = state
        else:
            state.limits = limits
        return state

    def admit(self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1) -> Reservation:
        """Take one request, `slots` concurrency slots (its prompts) and `tokens` (prompt
        plus reserved output) for the key, or raise `RateLimited` saying which limit and
        when to retry. Nothing is taken when any limit refuses."""
        now = self._clock()
        state = self._state(key_id, limits, now)
        requests, budget = state.requests, state.tokens
        cap = limits.max_concurrent
        if cap is not None and state.in_flight + slots > cap:
            raise RateLimited(concurrency_message(cap, slots), 1.0 if slots <= cap else 60.0)
        # `wait_for` only once a bucket is short: it runs on every keyed request.
        if requests is not None:
            requests.refill(now)
            if requests.level < 1:
                raise RateLimited(rpm_message(requests.capacity), requests.wait_for(1))
        if budget is not None:
            budget.refill(now)
            if budget.level < tokens:
                raise RateLimited(tpm_message(budget.capacity, tokens), budget.wait_for(tokens))
            budget.level -= tokens
        if requests is not None:
            requests.level -= 1
        state.in_flight += slots
        # The response's headers now, from the buckets just refilled: as OpenAI's, the
        # limits as they stood when the request was accepted (this request counted).
        return Reservation(key_id, tokens, slots, headers=state.headers())

    def admit_now(self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1) -> Reservation:
        return self.admit(key_id, limits, tokens, slots)

    async def acquire(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1
    ) -> Reservation:
        return self.admit(key_id, limits, tokens, slots)

    async def acquire_request(self, key_id: str, limits: KeyLimits) -> None:
        self.take_request(key_id, limits)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def take_request(self, key_id: str, limits: KeyLimits) -> None:
        """One request of the key's requests per minute for a request that generates
        nothing (no tokens, no concurrency slot held), or `RateLimited`."""
        now = self._clock()
        requests = self._state(key_id, limits, now).requests
        if requests is None:
            return
        requests.refill(now)
        wait = requests.wait_for(1)
        if wait > 0:
            raise RateLimited(rpm_message(requests.capacity), wait)
        requests.level -= 1

    def settle(self, reservation: Reservation, used_tokens: int) -> None:
        """The request ended: give back the concurrency slot and the reserved tokens it
        did not use (or take the ones it used beyond the reservation)."""
        state = give_back_slots(self._keys, reservation)
        if state is not None and state.tokens is not None:
            bucket = state.tokens
            bucket.level = min(bucket.capacity, bucket.level + reservation.tokens - used_tokens)

    def headers(self, key_id: str, limits: KeyLimits) -> list[tuple[bytes, bytes]]:
        """OpenAI's x-ratelimit-* headers for the key, as they stand now."""
        now = self._clock()
        state = self._state(key_id, limits, now)
        for bucket in state.buckets:
            bucket.refill(now)
        return state.headers()


def rpm_message(limit: int) -> str:
    return f"Rate limit reached for requests per minute (limit {limit})."


def tpm_message(limit: int, tokens: int) -> str:
    return f"Rate limit reached for tokens per minute (limit {limit}, requested {tokens})."


def concurrency_message(cap: int, slots: int) -> str:
    if slots > cap:
        return (
            f"This request has {slots} prompts, each a concurrent request; this key may run "
            f"{cap} at once. Send fewer prompts per request."
        )
    if slots > 1:
        return (
            f"Too many concurrent requests for this key (limit {cap}; this request's "
            f"{slots} prompts count as {slots})."
        )
    return f"Too many concurrent requests for this key (limit {cap})."


def duration(seconds: float) -> bytes:
    """OpenAI's reset format: `120ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return b"%dms" % math.ceil(seconds * 1000)
    if seconds < 60:
        return f"{seconds:.3g}s".encode()
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s".encode()
