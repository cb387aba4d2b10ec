"""The key cache on a real SQLite file: a flood of random well-formed keys costs one
query per distinct key (unknown keys are remembered as unknown), the memory it takes is
bounded with the least recently used keys dropped first (never a wipe of all), known
keys survive a flood, concurrent requests for one key share one query, and the keys in
use are read again together (one query a second for many tenants, in bounded batches,
trusted or refused one by one when that read fails), before their records expire, so
that no request of a key in steady use waits for the database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.db.engine import open_database
from app.tenancy.keys import auth as auth_module
from app.tenancy.keys.auth import OUTAGE_S, DatabaseKeys, InvalidKey, KeyStoreUnavailable
from app.tenancy.keys.cache import LruMap
from app.tenancy.keys.store import KeyLimits, KeyStore, new_secret


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


async def make_keys(store: KeyStore, count: int) -> list[str]:
    return [(await store.create(f"k{i}", KeyLimits()))[1] for i in range(count)]


async def ask_all(auth: DatabaseKeys, secrets: list[str]) -> None:
    for secret in secrets:
        assert (await auth.authenticate(header(secret))) is not None


async def keys_in_use(
    engine: AsyncEngine, count: int, **options: Any
) -> tuple[KeyStore, list[str], Clock, DatabaseKeys]:
    """`count` keys, each read once and asked for again half a TTL later (in use)."""
    store = KeyStore(engine)
    secrets = await make_keys(store, count)
    clock = Clock()
    auth = DatabaseKeys(store, clock, **options)
    await ask_all(auth, secrets)
    clock.now += 0.5
    await ask_all(auth, secrets)
    return store, secrets, clock, auth


def parameters(statement: str) -> int:
    """How many keys one query read (SQLite's `IN (?, ?, ...)`)."""
    return statement.count("?")


async def revoke_elsewhere(store: KeyStore, auth: DatabaseKeys, secret: str) -> None:
    """The key is cached here, then revoked by another replica (nobody tells this one)."""
    record = await auth.authenticate(header(secret))
    assert record is not None
    await store.revoke(record.id)


async def gone(engine: AsyncEngine) -> None:
    """The keys table disappears: every read of a key fails."""
    async with engine.begin() as conn:
        await conn.exec_driver_sql("ALTER TABLE api_keys RENAME TO api_keys_gone")


async def test_the_keys_in_use_are_read_again_in_one_query(sqlite_file: AsyncEngine) -> None:
    """Twenty tenants sending all the time: one read a second for all of them, not one
    per key."""
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 20)
    with key_queries(sqlite_file) as queries:
        for _ in range(3):
            clock.now += 0.6  # past the TTL: the first request reads them all
            await ask_all(auth, secrets)
            clock.now += 0.5
            await ask_all(auth, secrets)  # within the TTL: from the cache
    assert [parameters(statement) for statement in queries] == [20, 20, 20]


async def test_keys_not_asked_for_are_not_read_again(sqlite_file: AsyncEngine) -> None:
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 10)
    clock.now += 0.6
    await ask_all(auth, secrets[:4])  # all ten read together; the other six went quiet
    clock.now += 1.1
    with key_queries(sqlite_file) as queries:
        await ask_all(auth, secrets[:1])
    assert [parameters(statement) for statement in queries] == [4]


async def test_a_key_revoked_meanwhile_is_refused_after_the_shared_read(
    sqlite_file: AsyncEngine,
) -> None:
    store, secrets, clock, auth = await keys_in_use(sqlite_file, 5)
    await revoke_elsewhere(store, auth, secrets[3])
    clock.now += 0.6
    with key_queries(sqlite_file) as queries:
        await ask_all(auth, secrets[:3])  # reads all five
        assert await refused(auth, secrets[3])
        await ask_all(auth, secrets[4:])
    assert len(queries) == 1


async def test_an_unknown_key_is_read_alone(sqlite_file: AsyncEngine) -> None:
    """A flood of random keys must not take the keys in use along, one read each."""
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 5)
    with key_queries(sqlite_file) as queries:
        for _ in range(3):
            assert await refused(auth, new_secret())
        clock.now += 0.6
        await ask_all(auth, secrets)
    assert [parameters(statement) for statement in queries] == [1, 1, 1, 5]


async def test_many_keys_are_read_in_bounded_queries(
    sqlite_file: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth_module, "REFRESH_BATCH", 4)
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 10)
    clock.now += 0.6
    with key_queries(sqlite_file) as queries:
        await ask_all(auth, secrets)
    assert [parameters(statement) for statement in queries] == [4, 4, 2]


async def test_the_stale_key_waits_for_its_own_batch_only(
    sqlite_file: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant whose key went stale is answered after the first batch, not after the
    reads of every other tenant's key."""
    monkeypatch.setattr(auth_module, "REFRESH_BATCH", 4)
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 12)
    clock.now += 0.6
    with key_queries(sqlite_file) as queries:
        assert (await auth.authenticate(header(secrets[0]))) is not None
        answered_after = len(queries)
        while auth._pending:  # the other batches, read one after the other
            await asyncio.sleep(0.01)
    assert answered_after < 3
    assert [parameters(statement) for statement in queries] == [4, 4, 4]


async def test_a_failed_shared_read_trusts_only_the_keys_confirmed_lately(
    sqlite_file: AsyncEngine,
) -> None:
    """The keys table gone mid-run: in one failed read, a key the database confirmed
    within `outage_s` is trusted, one confirmed before that gets 503."""
    store = KeyStore(sqlite_file)
    old, recent = await make_keys(store, 2)
    clock = Clock()
    auth = DatabaseKeys(store, clock, outage_s=5)
    await ask_all(auth, [old])
    clock.now += 3
    await ask_all(auth, [recent])  # confirmed 3 s after `old`
    clock.now += 0.5
    await ask_all(auth, [recent])  # in use: read with the next stale key
    await gone(sqlite_file)
    clock.now += 2  # `old` confirmed 5.5 s ago, `recent` 2.5 s ago
    with key_queries(sqlite_file) as queries:
        with pytest.raises(KeyStoreUnavailable):
            await auth.authenticate(header(old))  # reads both; the read fails
        await ask_all(auth, [recent])  # trusted, and not asked again within the TTL
    assert [parameters(statement) for statement in queries] == [2]


def gated_reads(store: KeyStore, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The store's reads of keys wait until the event is set (a slow database)."""
    gate = asyncio.Event()
    read = store.by_hashes

    async def slow(digests: list[str]) -> Any:
        await gate.wait()
        return await read(digests)

    monkeypatch.setattr(store, "by_hashes", slow)
    return gate


async def read_finished(auth: DatabaseKeys) -> None:
    while auth._pending:
        await asyncio.sleep(0.01)


async def test_keys_in_use_are_read_ahead_and_nobody_waits(
    sqlite_file: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past three quarters of the TTL a request starts the keys' next read and is
    answered from the cache, however slow the read; a request whose record has expired
    joins that read and waits for it."""
    store, secrets, clock, auth = await keys_in_use(sqlite_file, 5)
    gate = gated_reads(store, monkeypatch)
    clock.now += 0.3  # 0.8 s since the keys were read
    with key_queries(sqlite_file) as queries:
        for secret in secrets:
            answer = await asyncio.wait_for(auth.authenticate(header(secret)), 1)
            assert answer is not None
        assert auth._pending  # the read runs, nobody waits for it
        clock.now += 0.25  # the records read 1.05 s ago have expired
        late = asyncio.ensure_future(auth.authenticate(header(secrets[2])))
        await asyncio.sleep(0.05)
        assert not late.done()  # waits for the read under way, not for one of its own
        gate.set()
        assert (await late) is not None
        clock.now += 0.7  # 0.95 s after the read began, 0.7 after its records came
        await ask_all(auth, secrets)
    assert [parameters(statement) for statement in queries] == [5]


async def test_a_revocation_seen_by_a_read_ahead_refuses_the_key_at_once(
    sqlite_file: AsyncEngine,
) -> None:
    store, secrets, clock, auth = await keys_in_use(sqlite_file, 3)
    await revoke_elsewhere(store, auth, secrets[1])
    clock.now += 0.3
    await ask_all(auth, secrets[:1])  # starts the read of all three
    await read_finished(auth)
    assert await refused(auth, secrets[1])
    await ask_all(auth, [secrets[0], secrets[2]])


async def test_a_failed_read_ahead_is_not_repeated_before_the_records_expire(
    sqlite_file: AsyncEngine,
) -> None:
    """The database gone, and the keys confirmed longer than `outage_s` ago: answered
    from their records until those expire, with no other read in between; then 503."""
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 2, outage_s=0.5)
    await gone(sqlite_file)
    clock.now += 0.3
    with key_queries(sqlite_file) as queries:
        await ask_all(auth, secrets)  # the read ahead starts, then fails
        await read_finished(auth)
        for _ in range(3):
            await ask_all(auth, secrets)  # from the cache, within the TTL
        assert len(queries) == 1
        clock.now += 0.25  # 1.05 s since the records were read
        for secret in secrets:
            with pytest.raises(KeyStoreUnavailable):
                await auth.authenticate(header(secret))
    # The read ahead; the first expired key's read (both keys in use), which fails; the
    # second key, left unanswered by it, asked again by its own request.
    assert [parameters(statement) for statement in queries] == [2, 2, 1]


async def test_a_failed_read_ahead_trusts_keys_confirmed_lately(sqlite_file: AsyncEngine) -> None:
    """Within `outage_s` of their last confirmation the keys stay in use through a
    failed read ahead, read ahead once per TTL meanwhile."""
    _, secrets, clock, auth = await keys_in_use(sqlite_file, 2)
    await gone(sqlite_file)
    clock.now += 0.3
    with key_queries(sqlite_file) as queries:
        await ask_all(auth, secrets)
        await read_finished(auth)
        for _ in range(4):
            clock.now += 0.25
            await ask_all(auth, secrets)
            await read_finished(auth)
    assert len(queries) == 2  # at 0.8 s, then 0.75 s after that read began
