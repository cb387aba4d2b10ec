"""The fleet's models on a real keys database (SQLite file and PostgreSQL): replicas
publish what they serve, see each other's models until the rows expire, and forget a
replica that left. Each `FleetModels` stands for one replica; time is a fake clock, the
database rounds are real."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import fleet_models
from app.tenancy.fleet.models import BEATS_TO_EXPIRE, FleetModels
from engine.scripted import ScriptedEngine
from engine.warm.model import WarmConfig
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper

INTERVAL_S = 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def replica(database: AsyncEngine, clock: Clock, *models: tuple[str, ...]) -> FleetModels:
    pool = ModelPool(PauseSleeper())
    for names in models:
        pool.add(ScriptedEngine(served_names=names), WarmConfig())
    fleet = FleetModels(database, interval_s=INTERVAL_S, clock=clock)
    fleet.serve(pool)
    return fleet


async def rows(database: AsyncEngine) -> int:
    async with database.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(fleet_models)) or 0)


async def test_replicas_see_each_others_models_until_their_rows_expire(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    a = replica(database, clock, ("alpha",))
    b = replica(database, clock, ("beta",))
    c = replica(database, clock, ("alpha", "beta"))
    for fleet in (a, b, c, a):
        await fleet.beat()
    assert await rows(database) == 4  # one row per replica and served name
    assert sorted(card.id for card in a.cards()) == ["alpha", "beta"]  # c's alpha, b's beta
    assert a.served_elsewhere("beta") and not a.served_elsewhere("gamma")
    assert a.here("alpha") and not a.here("beta")
    card = a.card("beta")
    assert card is not None and card.state == "awake" and card.max_model_len == 2048

    # b and c stop renewing: their models stay listed for the ttl, then drop out.
    clock.now += BEATS_TO_EXPIRE * INTERVAL_S - 0.5
    await a.beat()
    assert a.served_elsewhere("beta")
    clock.now += 1.0
    assert not a.served_elsewhere("beta")  # expired in the snapshot, before any beat
    assert a.cards() == [] and a.card("beta") is None
    await a.beat()  # ...and pruned from the table by the next heartbeat
    assert await rows(database) == 1

    # b comes back, then leaves cleanly: its rows go at once.
    await b.beat()
    await a.beat()
    assert a.served_elsewhere("beta")
    await b.leave()
    await a.beat()
    assert not a.served_elsewhere("beta") and await rows(database) == 1


async def test_the_published_state_says_where_a_model_is_awake(database: AsyncEngine) -> None:
    clock = Clock()
    a = replica(database, clock, ("alpha",))
    c = replica(database, clock, ("alpha",), ("beta",))
    assert a.published_awake("alpha") is None  # no peer known yet: cannot tell
    await c.beat()
    await a.beat()
    assert a.published_awake("alpha") is True
    assert c._pool is not None
    await c._pool.sleep(c._pool.models[0])  # alpha asleep on c, beta still awake
    await c.beat()
    await a.beat()
    assert a.published_awake("alpha") is False and a.published_awake("beta") is True
    card = a.card("alpha")
    assert card is not None and card.state == "asleep"
    # Two peers, one with it awake: the card shows the best state among them.
    b = replica(database, clock, ("alpha",))
    await b.beat()
    await a.beat()
    card = a.card("alpha")
    assert card is not None and card.state == "awake" and a.published_awake("alpha")


async def test_a_replica_that_cannot_reach_the_database_forgets_its_peers(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    a = replica(database, clock, ("alpha",))
    b = replica(database, clock, ("beta",))
    await b.beat()
    await a.start()  # the first heartbeat at start: b's models are known at once
    assert a.served_elsewhere("beta")
    await database.dispose()
    a.database = broken = _unreachable(database)
    clock.now += BEATS_TO_EXPIRE * INTERVAL_S + 0.1
    await a._beat_logged()  # fails quietly; the snapshot's entries expire on their own
    assert not a.served_elsewhere("beta") and a.published_awake("beta") is None
    a.database = database
    await a.close()
    await broken.dispose()


def _unreachable(database: AsyncEngine) -> AsyncEngine:
    """An engine on the same backend at an address nothing listens on."""
    from sqlalchemy.ext.asyncio import create_async_engine

    if database.dialect.name == "sqlite":
        return create_async_engine("sqlite+aiosqlite:////nonexistent-dir/x/lilac.db")
    return create_async_engine(
        "postgresql+asyncpg://nobody@127.0.0.1:1/none", connect_args={"timeout": 0.5}
    )


async def test_one_replicas_beats_at_once_take_turns(database: AsyncEngine) -> None:
    """A beat called while another of the same replica runs (the periodic one and one
    asked for) waits its turn, rather than inserting the replica's rows twice."""
    clock = Clock()
    a = replica(database, clock, ("alpha", "beta"))
    await asyncio.gather(*(a.beat() for _ in range(8)))
    assert a.beats == 8
    assert await rows(database) == 2
