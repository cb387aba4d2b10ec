"""Per-key limits that hold across every replica sharing a keys database (PostgreSQL,
or a SQLite file the servers of one host share; a server alone is a fleet of one).

Each key's requests and tokens per minute are one token bucket in the database
(app.tenancy.fleet.limit_store), and its concurrent requests one count of slots. A replica
does not ask the database per request: it leases a slice of each bucket (5% of the
limit over the live replicas, or what a waiting request needs) and admits from the
slice in memory. A background round (every `sync_interval_s`, and at once when a
request finds its slice short) tops the slices of busy keys up, gives back those of
keys idle for `IDLE_S` (what a round asks and applies: app.tenancy.fleet.rounds), and
renews the replica's heartbeat, which is how replicas count each other. A unit is
taken from the shared bucket before any replica spends it, so the fleet together
admits no more than one server would; leased units a replica sits on are at most 5% of
the limit (the others may then admit that much less).

Concurrency slots are leased the same way but sized to what is in flight: every round
gives back the slots a replica holds beyond its requests in flight, and a replica's
slots stop counting when its heartbeat expires (it died).

When a round fails (the database is down or slow), the replica counts alone: each
key gets its share, the limit divided by the replicas it last saw (at least 1), as a
local bucket starting from what the replica still held. The next round that succeeds
brings it back to the shared buckets. The slices and that local share are in
app.tenancy.fleet.leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from app.tasks import cancel_and_wait, wait_event
from app.tenancy.fleet.leases import (
    KeyLease,
    Lease,
    alone_refusal,
    fill_share,
    refill_alone,
    start_alone,
)
from app.tenancy.fleet.limit_store import WINDOW_S, LimitStore, share
from app.tenancy.fleet.rounds import apply_round, round_asks
from app.tenancy.keys.store import KeyLimits
from app.tenancy.limits import (
    Clock,
    RateLimited,
    Reservation,
    concurrency_message,
    duration,
    give_back_slots,
    rpm_message,
    tpm_message,
)

log = logging.getLogger("lilac.tenancy")

SYNC_INTERVAL_S = 0.5
WAIT_S = 1.0  # the longest a request waits for a round to top its slice up


class FleetLimiter:
    """The `RateLimiter` of a server with a keys database, shared or not."""

    def __init__(
        self,
        store: LimitStore,
        *,
        sync_interval_s: float = SYNC_INTERVAL_S,
        clock: Clock = time.time,
    ) -> None:
        self.store = store
        self.sync_interval_s = sync_interval_s
        self._clock = clock
        self._keys: dict[str, KeyLease] = {}
        self.replicas = 1  # live replicas at the last round, this one included
        self.alone = False  # counting alone: the last round failed
        self._wake = asyncio.Event()
        self._next: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.failed_rounds = 0

    @classmethod
    def for_engine(cls, engine: AsyncEngine, sync_interval_s: float) -> FleetLimiter:
        return cls(LimitStore(engine, uuid.uuid4().hex[:12]), sync_interval_s=sync_interval_s)

    # -- the request path ------------------------------------------------------------

    def _state(self, key_id: str, limits: KeyLimits, now: float) -> KeyLease:
        state = self._keys.get(key_id)
        if state is not None and state.limits is limits:  # the cached key's: most calls
            return state
        if state is not None and state.limits == limits:
            state.limits = limits  # the same limits read again: the next call finds it so
            return state
        if state is None or state.limits != limits:
            fresh = KeyLease(limits, now)
            if state is not None:  # limits changed: what is in flight still is
                fresh.in_flight, fresh.slots = state.in_flight, state.slots
            elif self.alone:  # first seen while counting alone: a full share, as a
                fill_share(fresh, self.replicas)  # single server starts full
            self._keys[key_id] = state = fresh
        return state

    def _touch(self, key_id: str, limits: KeyLimits) -> tuple[KeyLease, float]:
        """The key's slices as of now, marked used (and refilled while counting alone)."""
        now = self._clock()
        state = self._state(key_id, limits, now)
        state.used_at = now
        if self.alone:
            refill_alone(state, self.replicas, now)
        return state, now

    def admit_now(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1
    ) -> Reservation | None:
        """Admitted from this replica's slices, or refused (`RateLimited`); None when
        a round with the other replicas may still cover the request (`acquire` waits
        for it)."""
        _refuse_impossible(limits, tokens, slots)
        if limits.rpm is None and limits.tpm is None and limits.max_concurrent is None:
            return Reservation(key_id, tokens, slots)  # nothing to count, nothing to share
        return self._attempt(key_id, limits, tokens, slots, last=False)

    async def acquire(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1
    ) -> Reservation:
        reservation = self.admit_now(key_id, limits, tokens, slots)
        if reservation is not None:
            return reservation
        await self._await_round()
        reservation = self._attempt(key_id, limits, tokens, slots, last=True)
        assert reservation is not None  # the last attempt admits or raises
        return reservation

    def _attempt(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int, last: bool
    ) -> Reservation | None:
        state, now = self._touch(key_id, limits)
        refusal = self._shortfall(state, tokens, slots, now)
        if refusal is None:
            return self._take(state, key_id, tokens, slots)
        if self.alone or last or refusal.retry_after_s > 0:
            try:
                raise _with_retry(refusal)
            finally:  # the raised error's traceback holds this frame: no cycle back
                del refusal
        return None

    async def acquire_request(self, key_id: str, limits: KeyLimits) -> None:
        if limits.rpm == 0:
            raise RateLimited(rpm_message(0), math.inf)
        if limits.rpm is None:
            return
        for attempt in range(2):
            state, now = self._touch(key_id, limits)
            lease = state.requests
            assert lease is not None
            if not lease.short(1):
                lease.held -= 1
                return
            refusal = self._bucket_refusal(lease, 1, now, rpm_message(lease.capacity))
            if self.alone or attempt or refusal.retry_after_s > 0:
                try:
                    raise _with_retry(refusal)
                finally:  # the raised error's traceback holds this frame: no cycle back
                    del refusal
            await self._await_round()

    def _shortfall(
        self, state: KeyLease, tokens: int, slots: int, now: float
    ) -> RateLimited | None:
        """The refusal this request gets now, or None when the slices cover it. A
        refusal with `retry_after_s` 0 means: a round may still cover it (what it needs
        of every short slice is noted for that round)."""
        refusals: list[RateLimited] = []
        cap = state.limits.max_concurrent
        if cap is not None:
            ceiling = share(cap, self.replicas) if self.alone else state.slots
            if state.in_flight + slots > ceiling:
                if self.alone or now < state.slots_dry_until:
                    return RateLimited(concurrency_message(cap, slots), 1.0)
                state.slots_need = max(state.slots_need, state.in_flight + slots)
                refusals.append(RateLimited(concurrency_message(cap, slots), 0.0))
        if state.requests is not None and state.requests.short(1):
            text = rpm_message(state.requests.capacity)
            refusals.append(self._bucket_refusal(state.requests, 1, now, text))
        if state.tokens is not None and state.tokens.short(tokens):
            text = tpm_message(state.tokens.capacity, tokens)
            refusals.append(self._bucket_refusal(state.tokens, tokens, now, text))
        # A refusal no round can lift (known short) before one a round may lift.
        refusals.sort(key=lambda refusal: refusal.retry_after_s <= 0)
        return refusals[0] if refusals else None

    def _bucket_refusal(self, lease: Lease, amount: float, now: float, text: str) -> RateLimited:
        if self.alone:
            return alone_refusal(lease, amount, self.replicas, text)
        if now < lease.dry_until:
            return RateLimited(text, max(lease.dry_until - now, 0.001))
        lease.need = max(lease.need, amount)
        return RateLimited(text, 0.0)

    def _take(self, state: KeyLease, key_id: str, tokens: int, slots: int) -> Reservation:
        if state.requests is not None:
            state.requests.held -= 1
        if state.tokens is not None:
            state.tokens.held -= tokens
        state.in_flight += slots
        state.peak = max(state.peak, state.in_flight)
        # The response's headers: the limits as they stood when it was accepted.
        return Reservation(key_id, tokens, slots, headers=_headers(state))

    def settle(self, reservation: Reservation, used_tokens: int) -> None:
        state = give_back_slots(self._keys, reservation)
        if state is not None and state.tokens is not None:
            # unused reserved tokens stay in this replica's slice
            state.tokens.held += reservation.tokens - used_tokens

    def headers(self, key_id: str, limits: KeyLimits) -> list[tuple[bytes, bytes]]:
        return _headers(self._state(key_id, limits, self._clock()))

    # -- rounds ------------------------------------------------------------------------

    async def _await_round(self) -> None:
        """Until a round that starts after now has ended (at most `WAIT_S`)."""
        if self._task is None:  # not started (a test without a loop task): run one here
            await self.sync_once()
            return
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        future = self._next
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WAIT_S):
                await asyncio.shield(future)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="fleet-limits")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self._round_timeout()):
                await self.store.leave()

    def _round_timeout(self) -> float:
        return max(1.0, 2 * self.sync_interval_s)

    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, self.sync_interval_s)
            self._wake.clear()
            future, self._next = self._next, None
            try:
                await self.sync_once()
            except Exception:  # a bug here must not end the rounds: slices would run dry
                log.exception("fleet rate limits: a round failed")
            finally:
                if future is not None and not future.done():
                    future.set_result(None)

    async def sync_once(self) -> None:
        """One round with the store; on failure the replica counts alone until one
        succeeds."""
        now = self._clock()
        asks = round_asks(self._keys, now, self.replicas, self.alone)
        try:
            async with asyncio.timeout(self._round_timeout()):
                result = await self.store.exchange(now, self._ttl(), [ask for ask, _ in asks])
        except Exception as exc:  # any failure of the store: count alone, never unlimited
            self.failed_rounds += 1
            if not self.alone:
                log.warning(
                    "fleet rate limits: the shared store failed (%s); each key now gets "
                    "1/%d of its limits here until it answers",
                    type(exc).__name__,
                    self.replicas,
                )
                self._go_alone(now)
            return
        self.rounds += 1
        if self.alone:
            log.warning("fleet rate limits: the shared store answers again")
        self.replicas = result.replicas
        recovering, self.alone = self.alone, False
        apply_round(result, asks, now, recovering, self.sync_interval_s)

    def _ttl(self) -> float:
        return max(3 * self.sync_interval_s, 2.0)

    def _go_alone(self, now: float) -> None:
        self.alone = True
        start_alone(self._keys.values(), now)


def _with_retry(refusal: RateLimited) -> RateLimited:
    """A refusal no round decided (the round did not end in time): retry in a second."""
    if refusal.retry_after_s <= 0:
        refusal.retry_after_s = 1.0
    return refusal


def _refuse_impossible(limits: KeyLimits, tokens: int, slots: int) -> None:
    """Requests no amount of waiting admits: as a single server refuses them."""
    cap = limits.max_concurrent
    if cap is not None and slots > cap:
        raise RateLimited(concurrency_message(cap, slots), 60.0)
    if limits.rpm == 0:
        raise RateLimited(rpm_message(0), math.inf)
    if limits.tpm is not None and tokens > limits.tpm:
        raise RateLimited(tpm_message(limits.tpm, tokens), math.inf)


def _headers(state: KeyLease) -> list[tuple[bytes, bytes]]:
    """OpenAI's x-ratelimit-* headers of a key: the shared bucket as the last round left
    it plus this replica's slice. A key under its limits sends the same headers request
    after request: the last list is given again while the levels it was made from hold
    (callers never change it)."""
    levels = tuple(
        lease.left + lease.held for lease in (state.requests, state.tokens) if lease is not None
    )
    made_from, made = state.headers_cache
    if levels == made_from and made:
        return made
    made = _made_headers(state)
    state.headers_cache = (levels, made)
    return made


def _made_headers(state: KeyLease) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for kind, lease in ((b"requests", state.requests), (b"tokens", state.tokens)):
        if lease is None:
            continue
        remaining = max(0, min(lease.capacity, math.floor(lease.left + lease.held)))
        rate = lease.capacity / WINDOW_S
        reset = 0.0 if rate <= 0 else (lease.capacity - remaining) / rate
        out.append((b"x-ratelimit-limit-" + kind, str(lease.capacity).encode()))
        out.append((b"x-ratelimit-remaining-" + kind, str(remaining).encode()))
        out.append((b"x-ratelimit-reset-" + kind, duration(reset)))
    return out
