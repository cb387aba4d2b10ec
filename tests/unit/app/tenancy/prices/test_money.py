"""The cost arithmetic: exact integers, one rounding (half up), the batch discount, no
price is no cost; and amounts of the currency read exactly."""

from __future__ import annotations

import pytest

from app.tenancy.prices.money import Price, cost_micros, micros, per_token, units
from app.tenancy.prices.store import record_cost
from app.tenancy.usage.records import UsageRecord

KIMI = Price("kimi-k2.6", micros("0.70"), micros("0.20"), micros("3.50"))


def test_a_known_request() -> None:
    # 800 uncached at $0.70/M + 200 cached at $0.20/M + 500 out at $3.50/M
    # = 560,000,000 + 40,000,000 + 1,750,000,000 micro-units per million = 2350 micro-units.
    assert cost_micros(KIMI, 1000, 200, 500, batch=False) == 2350
    assert units(2350) == "0.002350"


def test_the_sum_is_rounded_once_half_up() -> None:
    price = Price("m", 1, 1, 1)  # a millionth of a micro-unit a token
    assert cost_micros(price, 499_999, 0, 0, batch=False) == 0
    assert cost_micros(price, 500_000, 0, 0, batch=False) == 1  # half: up
    # Each part alone would round to 0; their sum is a whole micro-unit.
    assert cost_micros(price, 300_000, 100_000, 200_000, batch=False) == 1
    assert cost_micros(Price("m", 700_001, 0, 0), 3, 0, 0, batch=False) == 2  # 2.100003


def test_batch_work_gets_its_discount() -> None:
    assert cost_micros(KIMI, 1000, 200, 500, batch=True) == 1175
    assert cost_micros(Price("m", 3, 0, 0, batch_discount=0), 10**6, 0, 0, batch=True) == 3
    assert cost_micros(Price("m", 3, 0, 0, batch_discount=100), 10**6, 0, 0, batch=True) == 0
    # 3 micro-units less 50%: 1.5, rounded once, up.
    assert cost_micros(Price("m", 3, 0, 0), 10**6, 0, 0, batch=True) == 2


def test_no_price_costs_nothing() -> None:
    assert cost_micros(None, 1000, 200, 500, batch=False) == 0


def test_a_records_cost_counts_reasoning_as_output_and_batches_as_batches() -> None:
    record = UsageRecord(
        "r", "k", "kimi-k2.6", "/v1/chat/completions", 1000, 200, 500, 300, 1,
        "completed", None, None, 1.0, 1_000_000.0,
    )  # fmt: skip
    assert record_cost(KIMI, record) == 2350
    record.batch_id = "batch_1"
    assert record_cost(KIMI, record) == 1175


def test_amounts_are_read_exactly() -> None:
    assert micros("0.70") == 700_000
    assert micros("3.5") == 3_500_000
    assert micros("0.000001") == 1
    for bad in ("-1", "0.0000001", "abc", "nan", "inf"):
        with pytest.raises(ValueError):
            micros(bad)


def test_per_token_strings() -> None:
    assert per_token(micros("0.70")) == "0.0000007"
    assert per_token(micros("3.50")) == "0.0000035"
    assert per_token(micros("0.20")) == "0.0000002"
    assert per_token(0) == "0"
    assert per_token(micros("15")) == "0.000015"


def test_a_price_is_checked() -> None:
    with pytest.raises(ValueError):
        Price("m", -1, 0, 0)
    with pytest.raises(ValueError):
        Price("m", 0, 0, 0, batch_discount=101)
