"""The per-client wake budget: a bucket of wakes per minute, refilled continuously,
forgotten once full again, never counting operators' wakes."""

from __future__ import annotations

import pytest

from engine.errors import WakeLimited
from engine.warm import wakes
from engine.warm.wakes import WakeBudget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_client_has_its_own_wakes_per_minute() -> None:
    clock = Clock()
    budget = WakeBudget(3, clock)
    for _ in range(3):
        budget.take("a", "m")
    with pytest.raises(WakeLimited) as caught:
        budget.take("a", "m")
    assert caught.value.retry_after_s == pytest.approx(20.0)
    assert "`m` is asleep" in caught.value.message
    budget.take("b", "m")  # b's are b's
    clock.now += 20.0
    budget.take("a", "m")  # one back every 20 s
    with pytest.raises(WakeLimited):
        budget.take("a", "m")


def test_operators_and_unlimited_budgets_are_not_counted() -> None:
    budget = WakeBudget(1, Clock())
    for _ in range(5):
        budget.take(None, "m")
    unlimited = WakeBudget(None, Clock())
    for _ in range(100):
        unlimited.take("a", "m")


def test_full_buckets_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakes, "_PRUNE_AT", 10)
    clock = Clock()
    budget = WakeBudget(2, clock)
    for client in range(10):
        budget.take(f"c{client}", "m")
    clock.now += 60.0  # every bucket full again
    budget.take("late", "m")
    assert list(budget._levels) == ["late"]
