"""A replica's slices of a key's shared buckets (app.tenancy.fleet.limits), and the
local share it counts from while the shared store does not answer.

Counting alone, each key gets its share of a limit: the limit divided by the replicas
the last good round saw (at least 1), as a local bucket refilling at that share per
minute from what the replica still held, never above the share (units held above it
are not drained) and never unlimited. A key first seen while alone starts with a full
share, as a single server would.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from app.tenancy.fleet.limit_store import WINDOW_S, share
from app.tenancy.keys.store import KeyLimits
from app.tenancy.limits import RateLimited


@dataclass(slots=True)
class Lease:
    """A replica's units of one of a key's buckets. `held` may go below 0 (a request
    used more tokens than it reserved): the debt is paid from the next grant."""

    capacity: int
    held: float = 0.0
    left: float = 0.0  # the shared bucket's level at the last round
    need: float = 0.0  # what a waiting request needs held
    dry_until: float = 0.0  # the shared bucket had too little before this time

    def short(self, amount: float) -> bool:
        return self.held < amount

    def refill_alone(self, replicas: int, elapsed: float) -> None:
        """Counting alone: refill towards this replica's share (never drains units it
        already holds above it)."""
        part = share(self.capacity, replicas)
        if self.held < part:
            self.held = min(float(part), self.held + elapsed * part / WINDOW_S)


class KeyLease:
    __slots__ = (
        "headers_cache",
        "in_flight",
        "limits",
        "peak",
        "requests",
        "slots",
        "slots_dry_until",
        "slots_need",
        "stamp",
        "tokens",
        "used_at",
    )

    def __init__(self, limits: KeyLimits, now: float) -> None:
        self.limits = limits
        self.requests = Lease(limits.rpm) if limits.rpm is not None else None
        self.tokens = Lease(limits.tpm) if limits.tpm is not None else None
        self.slots = 0  # concurrency slots held
        self.slots_need = 0
        self.slots_dry_until = 0.0
        self.in_flight = 0
        self.peak = 0  # most in flight since the last round
        # The last x-ratelimit headers made, and the levels they were made from.
        self.headers_cache: tuple[tuple[float, ...], list[tuple[bytes, bytes]]] = ((), [])
        self.used_at = now
        self.stamp = now  # last local refill while counting alone

    def idle(self) -> bool:
        held = [lease.held for lease in (self.requests, self.tokens) if lease is not None]
        return self.in_flight == 0 and self.slots == 0 and not any(held)


def fill_share(state: KeyLease, replicas: int) -> None:
    """A key first seen while counting alone: a full share of each bucket."""
    for lease in (state.requests, state.tokens):
        if lease is not None:
            lease.held = float(share(lease.capacity, replicas))


def start_alone(states: Iterable[KeyLease], now: float) -> None:
    """The shared store failed: local refills count from now."""
    for state in states:
        state.stamp = now


def refill_alone(state: KeyLease, replicas: int, now: float) -> None:
    """Refill a key's slices towards its share for the time since the last refill."""
    elapsed = max(0.0, now - state.stamp)
    state.stamp = now
    for lease in (state.requests, state.tokens):
        if lease is not None:
            lease.refill_alone(replicas, elapsed)


def alone_refusal(lease: Lease, amount: float, replicas: int, text: str) -> RateLimited:
    """A refusal while counting alone, with the wait until the share covers `amount`
    (never: more than the whole share)."""
    part = share(lease.capacity, replicas)
    rate = part / WINDOW_S
    wait = math.inf if amount > part or rate <= 0 else (amount - lease.held) / rate
    return RateLimited(text, max(wait, 0.001))
