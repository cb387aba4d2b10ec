"""A fresh, migrated keys database per test, on both backends: a real SQLite file and a
real PostgreSQL server (one per test session, a database per test)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.tenancy.db import async_url, open_database
from tests.postgres import TempPostgres, start_postgres

_numbers = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres]:
    pg = start_postgres()
    yield pg
    pg.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/lilac.db"
    else:
        pg: TempPostgres = request.getfixturevalue("pg_server")
        name = f"t{next(_numbers)}"
        admin = create_async_engine(async_url(pg.url()), isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"CREATE DATABASE {name}")
        await admin.dispose()
        url = pg.url(name)
    engine = await open_database(url)
    yield engine
    await engine.dispose()
