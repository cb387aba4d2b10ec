"""One round of a replica with the shared store (app.tenancy.fleet.limits): what it asks
for each key (its slices topped up, or given back when the key is idle, and the
concurrency slots it needs) and how the store's grants are applied to the slices.

A slice is `LEASE_FRACTION` of the limit over the live replicas (or what a waiting
request needs), topped up once below half; a key unused for `IDLE_S` with nothing in
flight gives its slices back, and is forgotten once it holds nothing.
"""

from __future__ import annotations

import math

from app.tenancy.fleet.leases import KeyLease, Lease
from app.tenancy.fleet.limit_store import WINDOW_S, Ask, Grant, Round

LEASE_FRACTION = 0.05  # a replica's slice of a bucket: this part of the limit, over replicas
IDLE_S = 10.0  # a key unused this long gives its slices back


def round_asks(
    keys: dict[str, KeyLease], now: float, replicas: int, alone: bool
) -> list[tuple[Ask, KeyLease]]:
    """What a round asks of the store for each key; keys idle with nothing held are
    forgotten."""
    asks = []
    for key_id, state in list(keys.items()):
        idle = now - state.used_at > IDLE_S and state.in_flight == 0
        if idle and state.idle():
            del keys[key_id]
            continue
        limits = state.limits
        ask = Ask(key_id, limits.rpm, limits.tpm, limits.max_concurrent)
        ask.requests = _want(state.requests, idle, replicas, alone)
        ask.tokens = _want(state.tokens, idle, replicas, alone)
        ask.slots_floor = state.in_flight
        # Spare slots go back each round, but as many as were in use at once since
        # the last one stay: a key sending one request after another keeps its slot.
        ask.slots = max(state.in_flight, state.slots_need, min(state.slots, state.peak))
        # Slots given back are given up now, not when the grant comes: a request
        # admitted while the round runs must fit in what the store will count as this
        # replica's, or the others could lease the same slot and the key run over its
        # limit.
        state.slots = min(state.slots, ask.slots)
        state.peak = state.in_flight
        asks.append((ask, state))
    return asks


def _want(lease: Lease | None, idle: bool, replicas: int, alone: bool) -> float:
    if lease is None:
        return 0.0
    # Units made up while counting alone were never taken from the store.
    held = min(lease.held, 0.0) if alone else lease.held
    if idle:
        return -held
    target = max(math.ceil(lease.capacity * LEASE_FRACTION / replicas), 1, lease.need)
    # Top up once below half the slice: a busy key rarely waits for a round.
    return target - held if held < max(target / 2, lease.need) else 0.0


def apply_round(
    result: Round,
    asks: list[tuple[Ask, KeyLease]],
    now: float,
    recovering: bool,
    sync_interval_s: float,
) -> None:
    """A round's grants into the slices it asked for (`recovering`: the first good round
    after counting alone, whose local units were never the store's)."""
    for ask, state in asks:
        grant = result.grants.get(ask.key_id, Grant())
        for lease, got, left in (
            (state.requests, grant.requests, grant.requests_left),
            (state.tokens, grant.tokens, grant.tokens_left),
        ):
            if lease is None:
                continue
            if recovering:
                lease.held = min(lease.held, 0.0)
            lease.held += got
            lease.left = left
            if lease.need and lease.held < lease.need:
                rate = lease.capacity / WINDOW_S
                lease.dry_until = now + (lease.need - lease.held) / rate if rate else math.inf
            lease.need = 0.0
        # What was in flight when the round asked is the grant's floor, and admissions
        # since fit in the slots kept at the ask: the grant covers every request in
        # flight (`max` only keeps a request counted should it ever not).
        state.slots = max(grant.slots, state.in_flight)
        if state.slots_need and state.slots < state.slots_need:
            state.slots_dry_until = now + min(1.0, sync_interval_s)
        state.slots_need = 0
