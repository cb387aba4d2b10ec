"""A fresh, migrated keys database per test, on both backends: a real SQLite file and a
real PostgreSQL server (the session's one, tests/conftest.py: a database per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import open_database
from tests.postgres import TempPostgres


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/lilac.db"
    else:
        pg: TempPostgres = request.getfixturevalue("pg_server")
        url = await pg.new_database()
    engine = await open_database(url)
    yield engine
    await engine.dispose()
