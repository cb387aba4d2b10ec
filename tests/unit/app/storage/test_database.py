"""The tenant-data database opens on first use, once, and is migrated."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import inspect

from app.storage.database import TenantDatabase
from app.tenancy.keys.store import KeyLimits, KeyRecord
from app.tenancy.scope import ANONYMOUS_OWNER, owner_of


def test_nothing_is_created_until_first_use(tmp_path: Path) -> None:
    path = tmp_path / "data" / "lilac.db"
    database = TenantDatabase(f"sqlite:///{path}")

    async def scenario() -> list[str]:
        assert not database.opened and not path.exists()
        first, second = await asyncio.gather(database.engine(), database.engine())
        assert first is second
        async with first.connect() as connection:
            tables = await connection.run_sync(lambda sync: inspect(sync).get_table_names())
        await database.close()
        return tables

    tables = asyncio.run(scenario())
    assert path.exists()
    assert "usage" in tables and "api_keys" in tables


def test_owner_is_the_key_or_the_anonymous_owner() -> None:
    key = KeyRecord(id="k1", name="acme", created_at=0.0, limits=KeyLimits())
    assert owner_of(key) == "k1"
    assert owner_of(None) == ANONYMOUS_OWNER
