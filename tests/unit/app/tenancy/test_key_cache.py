"""The key cache on a real SQLite file: a flood of random well-formed keys costs one
query per distinct key (unknown keys are remembered as unknown), the memory it takes is
bounded with the least recently used keys dropped first (never a wipe of all), known
keys survive a flood, and concurrent requests for one key share one query."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings
from app.tenancy import auth as auth_module
from app.tenancy.auth import OUTAGE_S, DatabaseKeys, InvalidKey
from app.tenancy.db import open_database
from app.tenancy.key_cache import LruMap
from app.tenancy.keys import KeyLimits, KeyStore, new_secret


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def sqlite_file(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = await open_database(f"sqlite:///{tmp_path}/lilac.db")
    yield engine
    await engine.dispose()


@contextmanager
def key_queries(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every lookup of a key by its hash that reaches the database, as it runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM api_keys" in statement and "key_hash" in statement:
            seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


def header(secret: str) -> bytes:
    return f"Bearer {secret}".encode()


async def refused(auth: DatabaseKeys, secret: str) -> bool:
    try:
        await auth.authenticate(header(secret))
    except InvalidKey:
        return True
    return False


def test_the_lru_map_drops_the_least_recently_used_one_at_a_time() -> None:
    lru: LruMap[int] = LruMap(3)
    for i, key in enumerate("abc"):
        lru.put(key, i)
    assert lru.get("a") == 0  # now the most recently used
    lru.put("d", 3)
    assert len(lru) == 3 and lru.get("b") is None
    assert [k for k, _ in lru.items()] == ["c", "a", "d"]


async def test_random_keys_twice_cost_one_query_each(sqlite_file: AsyncEngine) -> None:
    clock = Clock()
    auth = DatabaseKeys(KeyStore(sqlite_file), clock)
    flood = [new_secret() for _ in range(300)]
    with key_queries(sqlite_file) as queries:
        for _ in range(2):
            for secret in flood:
                assert await refused(auth, secret)
            clock.now += 10  # well past a known key's TTL: unknown ones are kept longer
    assert len(queries) == len(flood)
    assert auth.cached == (0, len(flood))


async def test_unknown_keys_are_asked_again_after_a_while(sqlite_file: AsyncEngine) -> None:
    clock = Clock()
    auth = DatabaseKeys(KeyStore(sqlite_file), clock, unknown_ttl_s=60)
    secret = new_secret()
    with key_queries(sqlite_file) as queries:
        assert await refused(auth, secret)
        clock.now += 59
        assert await refused(auth, secret)
        assert len(queries) == 1
        clock.now += 2
        assert await refused(auth, secret)
        assert len(queries) == 2


async def test_a_flood_is_bounded_and_keeps_known_keys(sqlite_file: AsyncEngine) -> None:
    store = KeyStore(sqlite_file)
    _, good = await store.create("good", KeyLimits())
    clock = Clock()
    auth = DatabaseKeys(store, clock, max_unknown=100, max_known=100)
    assert (await auth.authenticate(header(good))) is not None
    flood = [new_secret() for _ in range(350)]
    for secret in flood:
        assert await refused(auth, secret)
        assert auth.cached[1] <= 100  # never above the bound, at any point
    assert auth.cached == (1, 100)
    with key_queries(sqlite_file) as queries:
        # The newest 100 are still cached (no wipe-all), the older ones were dropped.
        for secret in flood[-100:]:
            assert await refused(auth, secret)
        assert queries == []
        assert await refused(auth, flood[0])
        assert len(queries) == 1
        # The real key is still known: no query within its TTL.
        assert (await auth.authenticate(header(good))) is not None
        assert len(queries) == 1


async def test_concurrent_requests_for_one_key_share_one_query(sqlite_file: AsyncEngine) -> None:
    store = KeyStore(sqlite_file)
    record, good = await store.create("good", KeyLimits())
    auth = DatabaseKeys(store)
    unknown = new_secret()
    with key_queries(sqlite_file) as queries:
        found = await asyncio.gather(*(auth.authenticate(header(good)) for _ in range(50)))
        misses = await asyncio.gather(*(refused(auth, unknown) for _ in range(50)))
    assert {r.id for r in found if r is not None} == {record.id}
    assert all(misses)
    assert len(queries) == 2


def test_the_outage_flag_defaults_to_the_authenticators() -> None:
    assert Settings().key_cache_outage_s == OUTAGE_S
    assert 60 <= OUTAGE_S <= 600  # a few minutes


async def test_a_revoked_key_is_refused_though_its_header_was_seen(
    sqlite_file: AsyncEngine,
) -> None:
    """The digest of a header seen before is reused; the key's record is still read
    again after its TTL, so a revocation is not hidden by it."""
    store = KeyStore(sqlite_file)
    record, good = await store.create("good", KeyLimits())
    clock = Clock()
    auth = DatabaseKeys(store, clock)
    assert (await auth.authenticate(header(good))) is not None
    await store.revoke(record.id)
    clock.now += 2  # past the known key's TTL
    assert await refused(auth, good)


async def test_the_digests_of_headers_are_bounded(sqlite_file: AsyncEngine) -> None:
    """A flood of distinct keys, and headers padded with spaces, keep the memory of
    headers' digests bounded; every header still gets its own key's answer."""
    store = KeyStore(sqlite_file)
    _, good = await store.create("good", KeyLimits())
    auth = DatabaseKeys(store, Clock())
    for _ in range(3 * auth_module.MAX_DIGESTS // 1000):
        for secret in [new_secret() for _ in range(1000)]:
            assert await refused(auth, secret)
        assert len(auth._digests) <= auth_module.MAX_DIGESTS
    padded = f"Bearer {good}{' ' * 4096}".encode()
    assert (await auth.authenticate(padded)) is not None
    assert padded not in auth._digests
    assert (await auth.authenticate(header(good))) is not None
    for bad in (b"", b"Bearer", b"Basic abc", "Bearer k\u00e9y".encode(), b"Bearer lilac-sk-x"):
        with pytest.raises(InvalidKey):
            await auth.authenticate(bad)
    with pytest.raises(InvalidKey):
        await auth.authenticate(None)
