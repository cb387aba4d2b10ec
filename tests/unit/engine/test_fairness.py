"""The service ledger: counters in weighted tokens per weight, the idle-return rule,
the last minute's shares, and the file another process reads them from."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.fairness import (
    SHARES_DIR_ENV,
    ServiceCosts,
    ServiceLedger,
    StepClock,
    StepTimes,
    read_shares,
    read_steps,
    shares_file,
    tenant_args,
    write_shares,
)


def test_a_counter_is_weighted_tokens_divided_by_the_weight() -> None:
    ledger = ServiceLedger(ServiceCosts(prompt=1.0, cached=0.1, output=2.0))
    ledger.arrive("a", weight=1.0)
    ledger.arrive("b", weight=2.0)
    ledger.charge("a", 0.0, prompt=100, cached=50, output=10)
    ledger.charge("b", 0.0, prompt=100, cached=50, output=10)
    assert ledger.counter("a") == pytest.approx(125.0)
    assert ledger.counter("b") == pytest.approx(62.5)


def test_prepaid_output_counts_once_and_the_unused_part_comes_back() -> None:
    ledger = ServiceLedger(ServiceCosts(prompt=1.0, cached=0.1, output=2.0))
    ledger.arrive("a", weight=2.0)
    ledger.prepay("a", 10)  # a request's budget of ten output tokens, at its start
    assert ledger.counter("a") == pytest.approx(10.0)
    ledger.charge("a", 0.0, prompt=100, output=1, prepaid=1)
    ledger.charge("a", 0.0, output=3, prepaid=3)
    assert ledger.counter("a") == pytest.approx((100 + 10 * 2.0) / 2)
    ledger.refund("a", 6)  # it stopped after four
    assert ledger.counter("a") == pytest.approx((100 + 4 * 2.0) / 2)
    assert ledger.tenants["a"].recent_sum == pytest.approx(100 + 4 * 2.0)  # served, once


def test_a_tenant_back_from_idle_starts_at_the_lowest_active_counter() -> None:
    ledger = ServiceLedger()
    ledger.arrive("heavy")
    ledger.arrive("steady")
    ledger.charge("heavy", 0.0, prompt=1000)
    ledger.charge("steady", 0.0, prompt=400)
    ledger.arrive("new")  # never seen: no banked credit below the active ones
    assert ledger.counter("new") == pytest.approx(400.0)
    ledger.leave("new", 1.0)
    ledger.charge("steady", 2.0, prompt=600)  # the others go on while it idles
    ledger.arrive("new")
    assert ledger.counter("new") == pytest.approx(1000.0)


def test_leaving_for_a_moment_keeps_a_higher_counter() -> None:
    ledger = ServiceLedger()
    ledger.arrive("heavy")
    ledger.arrive("light")
    ledger.charge("heavy", 0.0, prompt=5000)
    ledger.leave("heavy", 1.0)
    ledger.arrive("heavy")
    assert ledger.counter("heavy") == pytest.approx(5000.0)


def test_shares_cover_the_last_minute_only() -> None:
    ledger = ServiceLedger(ServiceCosts(prompt=1.0, cached=0.0, output=1.0))
    ledger.arrive("a")
    ledger.arrive("b")
    ledger.charge("a", 0.0, prompt=900)
    ledger.charge("a", 100.0, prompt=100)
    ledger.charge("b", 100.0, prompt=300)
    shares = {row.tenant: row for row in ledger.shares(100.0)}
    assert shares["a"].share == pytest.approx(0.25)
    assert shares["b"].share == pytest.approx(0.75)
    assert shares["a"].tokens == 1000
    assert shares["b"].counter == 0.0  # the least served active tenant
    assert shares["a"].counter == pytest.approx(700.0)


def test_idle_tenants_are_forgotten_after_a_while() -> None:
    ledger = ServiceLedger()
    ledger.arrive("gone")
    ledger.charge("gone", 0.0, prompt=10)
    ledger.leave("gone", 0.0)
    ledger.arrive("here")
    ledger.forget_idle(10_000.0)
    assert set(ledger.tenants) == {"here"}


def test_weights_are_bounded() -> None:
    ledger = ServiceLedger()
    ledger.arrive("zero", weight=0.0)
    ledger.arrive("nan", weight=float("nan"))
    ledger.arrive("huge", weight=1e12)
    assert ledger.tenants["zero"].weight == 1.0
    assert ledger.tenants["nan"].weight == 1.0
    assert ledger.tenants["huge"].weight == 1000.0


def test_shares_reach_another_reader_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARES_DIR_ENV, str(tmp_path))
    path = shares_file("some/model")
    assert path.parent == tmp_path
    assert read_shares(path) == (0.0, [])
    ledger = ServiceLedger()
    ledger.arrive("key:k1")
    ledger.charge("key:k1", 5.0, prompt=3, output=2)
    write_shares(path, ledger.shares(5.0), 5.0)
    published, shares = read_shares(path)
    assert published == 5.0
    assert [(s.tenant, s.tokens, s.active) for s in shares] == [("key:k1", 5, 1)]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left beside it


def test_tenant_args_name_the_tenant_and_weight() -> None:
    assert tenant_args("key:abc", 2) == {"lilac_tenant": "key:abc", "lilac_weight": 2.0}
    assert tenant_args(None, 1.0)["lilac_tenant"] == "-"


def test_steps_are_timed_schedule_to_schedule_while_busy(tmp_path: Path) -> None:
    clock = StepClock()
    clock.scheduled(0.0, busy=True)
    clock.scheduled(0.5, busy=True)  # the first step took 0.5 s
    clock.scheduled(0.7, busy=False)  # the second 0.2 s; nothing scheduled now
    clock.scheduled(9.0, busy=True)  # an idle gap is no step
    clock.scheduled(10.0, busy=True)
    times = clock.times()
    assert (times.count, times.max_s) == (3, 1.0)
    assert times.mean_s == pytest.approx((0.5 + 0.2 + 1.0) / 3, abs=1e-3)
    path = tmp_path / "shares.json"
    write_shares(path, [], 10.0, times)
    assert read_steps(path) == times
    assert read_steps(tmp_path / "missing.json") == StepTimes()
