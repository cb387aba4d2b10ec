"""The key store on both backends: keys are made, listed, changed and revoked; only
their hash is kept; keys made concurrently are all distinct and all kept."""

from __future__ import annotations

import asyncio
import math

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import api_keys
from app.tenancy.keys.store import (
    MAX_WEIGHT,
    PREFIX,
    KeyLimits,
    KeyNotFound,
    KeyStore,
    hash_key,
    new_secret,
    well_formed,
)


def test_a_key_is_256_random_bits_behind_a_prefix() -> None:
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith(PREFIX)
        assert len(secret) == len(PREFIX) + 43  # 32 bytes, URL-safe base64
        assert well_formed(secret)
    assert not well_formed("lilac-sk-short")
    assert not well_formed("sk-" + "a" * 43)


async def test_create_list_update_revoke(database: AsyncEngine) -> None:
    store = KeyStore(database)
    record, secret = await store.create("alice", KeyLimits(tpm=1000, models=("m1",)))
    assert record.limits.rpm == 200  # the default
    found = await store.by_hash(hash_key(secret))
    assert found is not None and found.id == record.id
    assert found.limits == KeyLimits(rpm=200, tpm=1000, models=("m1",))
    changed = await store.update(record.id, {"rpm": 5, "max_concurrent": 2, "models": None})
    assert changed.limits == KeyLimits(rpm=5, tpm=1000, max_concurrent=2)
    assert (await store.get(record.id)).limits == changed.limits
    revoked = await store.revoke(record.id)
    assert revoked.revoked and (await store.get(record.id)).revoked
    assert [k.id for k in await store.list()] == [record.id]


async def test_only_the_hash_is_stored(database: AsyncEngine) -> None:
    _, secret = await KeyStore(database).create("bob", KeyLimits())
    async with database.connect() as conn:
        row = (await conn.execute(select(api_keys))).one()
    assert secret not in [str(value) for value in row]
    assert row.key_hash == hash_key(secret)


async def test_unknown_ids_are_reported(database: AsyncEngine) -> None:
    store = KeyStore(database)
    for call in (store.revoke("key_nope"), store.update("key_nope", {"rpm": 1})):
        try:
            await call
        except KeyNotFound as exc:
            assert "key_nope" in str(exc)
        else:
            raise AssertionError("no KeyNotFound")
    assert await store.by_hash(hash_key(new_secret())) is None


async def test_concurrent_creation_keeps_every_key(database: AsyncEngine) -> None:
    store = KeyStore(database)
    made = await asyncio.gather(*(store.create(f"k{i}", KeyLimits()) for i in range(20)))
    ids = {record.id for record, _ in made}
    assert len(ids) == 20
    assert {k.id for k in await store.list()} == ids
    for record, secret in made:
        assert (await store.by_hash(hash_key(secret))).id == record.id  # type: ignore[union-attr]


async def test_a_key_has_a_cache_group(database: AsyncEngine) -> None:
    store = KeyStore(database)
    record, _ = await store.create("grouped", KeyLimits(), cache_group="team-a")
    assert (await store.get(record.id)).cache_group == "team-a"
    assert (await store.update(record.id, {"rpm": 3})).cache_group == "team-a"  # kept
    cleared = await store.update(record.id, {}, cache_group=None)
    assert cleared.cache_group is None and (await store.get(record.id)).cache_group is None
    assert (await store.get(record.id)).public()["cache_group"] is None


async def test_the_last_use_of_many_keys_is_one_statement(database: AsyncEngine) -> None:
    """The usage writer records the last use of every key of a batch at once: one
    statement the driver runs for all of them, each key getting its own time."""
    from sqlalchemy import event

    store = KeyStore(database)
    records = [(await store.create(f"k{i}", KeyLimits()))[0] for i in range(40)]
    untouched, *touched = records
    statements: list[tuple[str, bool]] = []

    def seen(_c: object, _cur: object, statement: str, _p: object, _x: object, many: bool) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            statements.append((statement, many))

    event.listen(database.sync_engine, "before_cursor_execute", seen)
    try:
        await store.touch({record.id: 1000.0 + i for i, record in enumerate(touched)})
    finally:
        event.remove(database.sync_engine, "before_cursor_execute", seen)
    assert len(statements) == 1 and statements[0][1]  # one executemany
    last_used = {record.id: record.last_used_at for record in await store.list()}
    assert last_used[untouched.id] is None
    assert [last_used[record.id] for record in touched] == [1000.0 + i for i in range(39)]


async def test_a_key_has_a_weight(database: AsyncEngine) -> None:
    """Weight 1 unless given; kept and changed like the limits; a weight a key may not
    have (not > 0, over the maximum, NaN) is refused before it reaches the database."""
    store = KeyStore(database)
    plain, _ = await store.create("plain", KeyLimits())
    assert (await store.get(plain.id)).limits.weight == 1.0
    heavy, secret = await store.create("heavy", KeyLimits(weight=2.5))
    found = await store.by_hash(hash_key(secret))
    assert found is not None and found.limits.weight == 2.5
    assert found.public()["weight"] == 2.5
    changed = await store.update(heavy.id, {"weight": MAX_WEIGHT})
    assert (await store.get(heavy.id)).limits == changed.limits
    assert changed.limits.weight == MAX_WEIGHT and changed.limits.rpm == 200
    for bad in (0.0, -1.0, MAX_WEIGHT * 1.5, math.nan):
        with pytest.raises(ValueError, match="weight"):
            await store.update(heavy.id, {"weight": bad})
        with pytest.raises(ValueError, match="weight"):
            await store.create("bad", KeyLimits(weight=bad))
    assert (await store.get(heavy.id)).limits.weight == MAX_WEIGHT
    assert len(await store.list()) == 2
