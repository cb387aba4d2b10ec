"""The price store on both backends: a price from a time on, the one in force at any
time (a change never reprices what came before it), the prices in force now, seeds
that never overwrite, and the book each process reads."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.deferred.lines import _insert_usage
from app.tenancy.prices.money import Price
from app.tenancy.prices.seeds import parse_seed
from app.tenancy.prices.store import PriceStore, price_in
from app.tenancy.usage.records import UsageRecord
from tests.unit.app.tenancy.helpers import usage_rows


def record(model: str, at: float, batch_id: str | None = None) -> UsageRecord:
    return UsageRecord(
        f"req-{model}-{at}-{batch_id}", "key_1", model, "/v1/chat/completions",
        1000, 200, 500, 0, 1, "completed", None, None, 1.0, at, batch_id=batch_id,
    )  # fmt: skip


async def test_price_at_across_a_change(database: AsyncEngine) -> None:
    store = PriceStore(database)
    await store.set_price("m", 700_000, 200_000, 3_500_000, effective_from=1000.0)
    await store.set_price("m", 1_000_000, 250_000, 4_000_000, 25, effective_from=2000.0)
    assert store.price_at("m", 999.0) is None
    assert store.price_at("m", 1000.0) == Price("m", 700_000, 200_000, 3_500_000, 50, 1000.0)
    assert store.price_at("m", 1999.9) == Price("m", 700_000, 200_000, 3_500_000, 50, 1000.0)
    assert store.price_at("m", 2000.0) == Price("m", 1_000_000, 250_000, 4_000_000, 25, 2000.0)
    assert store.price_at("other", 2000.0) is None
    # Another process reads the same from the database.
    other = PriceStore(database)
    await other.reload()
    assert other.price_at("m", 1500.0) == store.price_at("m", 1500.0)
    async with database.connect() as conn:
        assert await price_in(conn, "m", 1500.0) == store.price_at("m", 1500.0)
        assert await price_in(conn, "m", 500.0) is None


async def test_current_leaves_out_a_price_not_yet_in_force(database: AsyncEngine) -> None:
    store = PriceStore(database)
    now = time.time()
    await store.set_price("m", 1, 1, 1, effective_from=now - 10)
    await store.set_price("m", 2, 2, 2, effective_from=now + 3600)
    await store.set_price("n", 5, 5, 5)
    current = store.current()
    assert sorted(current) == ["m", "n"]
    assert current["m"].input_micros == 1


async def test_setting_the_same_time_again_replaces_it(database: AsyncEngine) -> None:
    store = PriceStore(database)
    await store.set_price("m", 1, 1, 1, effective_from=10.0)
    await store.set_price("m", 2, 2, 2, effective_from=10.0)
    assert [p.input_micros for p in store.book.all()] == [2]


async def test_a_bad_price_is_refused(database: AsyncEngine) -> None:
    store = PriceStore(database)
    with pytest.raises(ValueError):
        await store.set_price("m", -1, 0, 0)
    with pytest.raises(ValueError):
        await store.set_price("", 1, 1, 1)
    assert (await store.reload()).all() == []


async def test_seeds_never_overwrite_a_price(database: AsyncEngine) -> None:
    store = PriceStore(database)
    await store.set_price("kept", 9, 9, 9, effective_from=5.0)
    seeds = [parse_seed("kept=0.70/0.20/3.50", 7.0), parse_seed("org/new=0.70/0.20/3.50", 7.0)]
    written = await store.seed(seeds)
    assert [p.model for p in written] == ["org/new"]
    assert await store.seed(seeds) == []  # the next start writes nothing
    assert store.price_at("kept", 10.0) == Price("kept", 9, 9, 9, 50, 5.0)
    assert store.price_at("org/new", 10.0) == Price("org/new", 700_000, 200_000, 3_500_000, 50, 7.0)


def test_a_bad_seed_says_what_is_wrong() -> None:
    for bad in ("m", "m=1/2", "=1/2/3", "m=1/2/-3", "m=a/b/c"):
        with pytest.raises(ValueError, match="--price"):
            parse_seed(bad)


async def test_a_records_cost_before_and_after_the_book_is_read(database: AsyncEngine) -> None:
    store = PriceStore(database)
    assert store.cost_of(record("m", 10.0)) is None  # never read: not known
    await store.reload()
    assert store.cost_of(record("m", 10.0)) == 0  # read, no price: 0
    await store.set_price("m", 700_000, 200_000, 3_500_000, effective_from=5.0)
    assert store.cost_of(record("m", 10.0)) == 2350
    assert store.cost_of(record("m", 4.0)) == 0  # before the price


async def test_a_batch_row_is_billed_at_its_discount(database: AsyncEngine) -> None:
    """Deferred work is billed in its own transaction, at the price read there."""
    store = PriceStore(database)
    await store.set_price("m", 700_000, 200_000, 3_500_000, effective_from=5.0)
    async with database.begin() as conn:
        await _insert_usage(conn, record("m", 10.0, batch_id="batch_1"))
        await _insert_usage(conn, record("m", 10.0))  # a background response: no discount
        await _insert_usage(conn, record("unpriced", 10.0, batch_id="batch_1"))
    rows = await usage_rows(database)
    assert [(r.model, r.batch_id, r.cost_micros) for r in rows] == [
        ("m", "batch_1", 1175),
        ("m", None, 2350),
        ("unpriced", "batch_1", 0),
    ]
