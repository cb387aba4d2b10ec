"""Replicas starting together on one fresh database: four processes, each with its own
engine, released at the same instant to open (and so migrate) it. Every one comes up,
and the schema is at the newest revision once: migrating takes a lock (a PostgreSQL
advisory lock; a flock beside a SQLite file)."""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from app.db.engine import alembic_config, create_engine, open_database
from tests.postgres import TempPostgres

REPLICAS = 4


def _replica(url: str, barrier: Barrier) -> None:
    """One replica's start: wait for the others, then open the database."""
    barrier.wait(timeout=120)

    async def start() -> None:
        engine = await open_database(url)
        await engine.dispose()

    asyncio.run(start())


@pytest.fixture(params=["sqlite", "postgresql"])
async def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/lilac.db"
    pg: TempPostgres = request.getfixturevalue("pg_server")
    return await pg.new_database("m")


async def test_four_replicas_starting_at_once_all_come_up(fresh_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(REPLICAS)
    replicas = [
        context.Process(target=_replica, args=(fresh_url, barrier)) for _ in range(REPLICAS)
    ]
    for replica in replicas:
        replica.start()
    for replica in replicas:
        await asyncio.to_thread(replica.join, 180)
    assert [r.exitcode for r in replicas] == [0] * REPLICAS

    engine = create_engine(fresh_url)
    async with engine.connect() as conn:
        versions = (await conn.exec_driver_sql("SELECT version_num FROM alembic_version")).all()
        keys = (await conn.exec_driver_sql("SELECT count(*) FROM api_keys")).scalar()
    await engine.dispose()
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert versions == [(head,)]
    assert keys == 0
