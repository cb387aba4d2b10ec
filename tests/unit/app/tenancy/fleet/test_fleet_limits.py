"""Fleet-wide limits on a real PostgreSQL server and on one SQLite file: several
`FleetLimiter`s in one process stand for replicas (each with its own connection pool and
replica id), on one database. Time is a shared fake clock, so a minute of flooding takes
seconds; the rounds with the database are real."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.engine import async_url, create_engine
from app.tenancy.fleet.limit_store import LimitStore
from app.tenancy.fleet.limits import FleetLimiter
from app.tenancy.keys.store import KeyLimits
from app.tenancy.limits import Limiter, RateLimited
from tests.postgres import TempPostgres, start_postgres

_numbers = itertools.count()
STEP_S = 0.25  # fake seconds between flood waves
CLIENTS = 3  # concurrent clients per replica per wave


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def own_pg() -> Iterator[TempPostgres]:
    """A server of this module's own: one test stops it."""
    pg = start_postgres()
    yield pg
    pg.stop()


@pytest.fixture(params=["postgresql", "sqlite"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind replicas share (SQLite: a file on one host)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/lilac.db"
        from app.db.engine import open_database

        await (await open_database(url)).dispose()  # made and migrated, as a server does
        return url
    return await pg_database_url(request.getfixturevalue("own_pg"))


@pytest.fixture
async def pg_url(own_pg: TempPostgres) -> str:
    return await pg_database_url(own_pg)


async def pg_database_url(own_pg: TempPostgres) -> str:
    name = f"f{next(_numbers)}"
    admin = create_async_engine(async_url(own_pg.url()), isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f"CREATE DATABASE {name}")
    await admin.dispose()
    return own_pg.url(name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def fleet(
    url: str, replicas: int, clock: FakeClock, start: bool = True
) -> AsyncIterator[tuple[list[FleetLimiter], list[AsyncEngine]]]:
    engines = [create_engine(url) for _ in range(replicas)]
    limiters = [
        FleetLimiter(LimitStore(e, f"r{i}"), sync_interval_s=0.05, clock=clock)
        for i, e in enumerate(engines)
    ]
    for limiter in limiters:  # each heartbeats once, then every one counts them all
        await limiter.sync_once()
    for limiter in limiters:
        await limiter.sync_once()
        assert limiter.replicas == replicas
    for limiter in limiters:
        if start:  # rounds in the background, as a server runs them
            await limiter.start()
    try:
        yield limiters, engines
    finally:
        for limiter in limiters:
            await limiter.close()
        for engine in engines:
            await engine.dispose()


async def flood(
    limiters: list[FleetLimiter], limits: KeyLimits, clock: FakeClock, seconds: float
) -> list[int]:
    """Every replica's clients try a request each wave; the admitted count per replica."""
    admitted = [0] * len(limiters)

    async def client(index: int) -> None:
        try:
            reservation = await limiters[index].acquire("k", limits, 1)
        except RateLimited:
            return
        admitted[index] += 1
        limiters[index].settle(reservation, 1)

    # Which replica's clients ask first changes at random each wave, as it does between
    # real servers: in a fixed order (or one that turns with a period), the first to ask
    # when a unit comes back is always the same replica.
    order = random.Random(len(limiters))
    clients = [i for i in range(len(limiters)) for _ in range(CLIENTS)]
    end = clock.now + seconds
    while clock.now < end:
        order.shuffle(clients)
        await asyncio.gather(*(client(i) for i in clients))
        clock.now += STEP_S
    return admitted


def single_server(limits: KeyLimits, seconds: float, clients: int) -> int:
    """What one server's limiter admits under the same waves."""
    now = [0.0]
    limiter = Limiter(clock=lambda: now[0])
    admitted = 0
    while now[0] < seconds:
        for _ in range(clients):
            try:
                limiter.settle(limiter.admit("k", limits, 1), 1)
                admitted += 1
            except RateLimited:
                pass
        now[0] += STEP_S
    return admitted


@pytest.mark.parametrize("replicas", [2, 4])
async def test_a_fleet_admits_what_one_server_would_per_minute(
    database_url: str, clock: FakeClock, replicas: int
) -> None:
    limits = KeyLimits(rpm=60)
    async for limiters, _ in fleet(database_url, replicas, clock):
        first = await flood(limiters, limits, clock, 60.0)  # from a full bucket
        second = await flood(limiters, limits, clock, 60.0)  # flooded all along
    # One server: a full bucket (60) then one a second.
    alone = single_server(limits, 60.0, CLIENTS * replicas)
    bound = 60 * 0.05 + replicas
    print(f"\n{replicas} replicas, rpm 60: first minute {first} (one server {alone}), "
          f"second minute {second} = {sum(second)}")  # fmt: skip
    assert sum(first) <= alone + bound
    assert sum(second) <= 60 + bound
    # ...and no replica sits on units the others could use: close to the limit.
    assert sum(second) >= 60 * 0.9
    assert all(count > 0 for count in second)


async def test_tokens_per_minute_hold_across_replicas(database_url: str, clock: FakeClock) -> None:
    limits = KeyLimits(tpm=1000)
    admitted = 0
    async for limiters, _ in fleet(database_url, 2, clock):
        for _ in range(40):  # 10 fake seconds: 1000 + 10/60 of 1000
            for limiter in limiters:
                try:
                    reservation = await limiter.acquire("k", limits, 100)
                except RateLimited as exc:
                    assert "tokens per minute" in exc.message
                    continue
                admitted += 100
                limiter.settle(reservation, 100)
            clock.now += STEP_S
    assert 900 <= admitted <= 1000 + 1000 * 10 / 60 + 1000 * 0.05 + 200


async def test_concurrent_requests_hold_across_replicas(
    database_url: str, clock: FakeClock
) -> None:
    limits = KeyLimits(max_concurrent=4)
    running = [0]
    most = [0]

    async def client(limiter: FleetLimiter) -> None:
        for _ in range(20):
            try:
                reservation = await limiter.acquire("k", limits, 1)
            except RateLimited as exc:
                assert "concurrent" in exc.message
                await asyncio.sleep(0.01)
                continue
            running[0] += 1
            most[0] = max(most[0], running[0])
            await asyncio.sleep(0.02)
            running[0] -= 1
            limiter.settle(reservation, 1)

    async for limiters, _ in fleet(database_url, 2, clock):
        await asyncio.gather(*(client(limiters[i % 2]) for i in range(8)))
    assert 2 <= most[0] <= 4


async def test_a_replica_that_loses_the_store_counts_its_share_alone(
    pg_url: str, clock: FakeClock, own_pg: TempPostgres
) -> None:
    limits = KeyLimits(rpm=60, max_concurrent=4)
    fresh = KeyLimits(rpm=60)
    async for limiters, _ in fleet(pg_url, 2, clock):
        await flood(limiters, limits, clock, 5.0)  # in use, slices leased
        own_pg.halt()
        try:
            for limiter in limiters:
                await limiter.sync_once()
                assert limiter.alone and limiter.replicas == 2
            per_replica = await flood(limiters, limits, clock, 60.0)
            # A key first seen during the outage: a full share, then the share's rate.
            news = [0, 0]
            for _ in range(240):
                for i, limiter in enumerate(limiters):
                    try:
                        await limiter.acquire_request("new", fresh)
                    except RateLimited:
                        continue
                    news[i] += 1
                clock.now += STEP_S
            # Concurrency: each replica runs its share (4 / 2) at most.
            held = []
            for _ in range(3):
                try:
                    held.append(await limiters[0].acquire("k", limits, 1))
                except RateLimited as exc:
                    assert "concurrent" in exc.message
            assert len(held) == 2
        finally:
            own_pg.resume()
        print(f"\nstore stopped, rpm 60, 2 replicas: per replica per minute {per_replica}, "
              f"a new key {news}")  # fmt: skip
        for count in per_replica:  # 30 a minute each, plus what its slice still held
            assert 28 <= count <= 30 + 3 + 1
        for count in news:  # a full share of 30, then 30 over the minute
            assert 58 <= count <= 61
        for limiter in limiters:  # the store is back: shared buckets again
            await limiter.sync_once()
            assert not limiter.alone


async def test_replicas_count_each_other_and_a_leaving_one_stops_counting(
    database_url: str, clock: FakeClock
) -> None:
    async for limiters, _ in fleet(database_url, 4, clock, start=False):
        await limiters[3].close()
        await limiters[0].sync_once()
        assert limiters[0].replicas == 3
        # A replica that dies without leaving stops counting once its heartbeat expires.
        clock.now += 10.0
        await limiters[0].sync_once()
        assert limiters[0].replicas == 1


async def test_every_keys_database_gets_the_fleets_limiter(
    database_url: str, tmp_path: Path
) -> None:
    from app.db.engine import open_database
    from app.tenancy.service import Tenancy

    tenancy = Tenancy.with_database(await open_database(database_url), tmp_path / "a.jsonl")
    try:
        assert isinstance(tenancy.limiter, FleetLimiter)
    finally:
        await tenancy.close()


async def test_a_key_without_limits_costs_no_round(database_url: str, clock: FakeClock) -> None:
    async for limiters, _ in fleet(database_url, 2, clock, start=False):
        unlimited = KeyLimits(rpm=None)
        reservation = await limiters[0].acquire("free", unlimited, 10**6, slots=64)
        limiters[0].settle(reservation, 10**6)
        rounds = limiters[0].rounds
        await limiters[0].sync_once()
        assert limiters[0].rounds == rounds + 1 and "free" not in limiters[0]._keys


def test_a_sync_interval_of_zero_refuses_to_start() -> None:
    from app.config.settings import Settings
    from app.tenancy.service import AuthConfigError, Tenancy

    with pytest.raises(AuthConfigError, match="--limit-sync-interval-s"):
        Tenancy.from_settings(Settings(auth="keys", limit_sync_interval_s=0))


@pytest.mark.parametrize("steps_after_wake", range(4))
async def test_close_ends_the_rounds_when_it_comes_as_a_round_is_woken(
    database_url: str, clock: FakeClock, steps_after_wake: int
) -> None:
    """A request wakes the round loop (its key needs a round) in the loop step where the
    server's close cancels it: the loop stops, and the close returns at once (with
    `asyncio.wait_for` in the loop, the cancellation was lost and the close hung)."""
    engine = create_async_engine(async_url(database_url))
    limiter = FleetLimiter(LimitStore(engine, "r0"), sync_interval_s=3600, clock=clock)
    try:
        await limiter.sync_once()
        await limiter.start()
        await asyncio.sleep(0.05)  # the loop is parked in its wait
        limiter._wake.set()
        for _ in range(steps_after_wake):
            await asyncio.sleep(0)
        closing = asyncio.ensure_future(limiter.close())
        done, _ = await asyncio.wait([closing], timeout=4)
        assert done == {closing}, "the close still waits on the round loop"
        assert limiter._task is None
    finally:
        await engine.dispose()


async def test_admission_waits_for_a_round_only_when_the_slices_fall_short(
    database_url: str, clock: FakeClock
) -> None:
    async for limiters, _ in fleet(database_url, 2, clock):
        limits = KeyLimits(rpm=600)
        # A key new to the fleet holds no slice yet: only a round can admit it.
        assert limiters[0].admit_now("k", limits, 10) is None
        reservation = await limiters[0].acquire("k", limits, 10)
        assert reservation.key_id == "k"
        # The slice that round gave this replica covers the next request here and now.
        again = limiters[0].admit_now("k", limits, 10)
        assert again is not None and again.key_id == "k"
