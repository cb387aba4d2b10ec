"""A replica's round with the shared store, as pure functions: the concurrency slots it
gives back are given up when it asks, so that what it admits while the round runs fits
in what the store counts as its own."""

from __future__ import annotations

from app.tenancy.fleet.leases import KeyLease
from app.tenancy.fleet.limit_store import Grant, Round
from app.tenancy.fleet.rounds import apply_round, round_asks
from app.tenancy.keys.store import KeyLimits


def test_slots_a_round_gives_back_are_given_up_when_it_asks() -> None:
    state = KeyLease(KeyLimits(max_concurrent=4), now=0.0)
    state.slots, state.in_flight, state.peak = 3, 2, 2
    ((ask, _),) = round_asks({"k": state}, now=0.0, replicas=2, alone=False)
    # The third slot goes back: the other replica may lease it as soon as the store
    # has this round, so this one must not admit into it meanwhile.
    assert ask.slots == 2 and ask.slots_floor == 2
    assert state.slots == 2
    # The store grants at least what was in flight when the round asked.
    apply_round(Round(replicas=2, grants={"k": Grant(slots=2)}), [(ask, state)], 0.0, False, 0.05)
    assert state.slots == 2


def test_slots_a_round_asks_for_stay_usable_until_it_answers() -> None:
    state = KeyLease(KeyLimits(max_concurrent=4), now=0.0)
    state.slots, state.in_flight, state.slots_need = 2, 2, 3
    ((ask, _),) = round_asks({"k": state}, now=0.0, replicas=2, alone=False)
    assert ask.slots == 3 and state.slots == 2  # held until granted, not before
    apply_round(Round(replicas=2, grants={"k": Grant(slots=3)}), [(ask, state)], 0.0, False, 0.05)
    assert state.slots == 3
