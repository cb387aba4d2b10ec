"""The app with `--auth keys` over a scripted engine and a real keys database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.db.schema import usage, usage_dead_letter, usage_refusals
from app.main import create_app
from app.tenancy.keys.auth import OUTAGE_S, DatabaseKeys
from app.tenancy.keys.store import KeyLimits, KeyRecord
from app.tenancy.service import Tenancy
from engine.protocol import Engine
from engine.scripted import ScriptedEngine
from tests.client import AppClient

ADMIN_KEY = "admin-secret"
URL = "/v1/chat/completions"


def chat(**extra: Any) -> dict[str, Any]:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi there"}]}
    return {**body, "max_tokens": 8, **extra}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@asynccontextmanager
async def keyed_app(
    database: AsyncEngine,
    spool: Path,
    engine: Engine | None = None,
    outage_s: float = OUTAGE_S,
    **settings: Any,
) -> AsyncIterator[tuple[AppClient, Tenancy]]:
    tenancy = Tenancy.with_database(database, spool, outage_s=outage_s)
    app = create_app(
        Settings(admin_key=ADMIN_KEY, auth="keys", **settings),
        engine=engine or ScriptedEngine(),
        tenancy=tenancy,
    )
    async with AppClient(app, timeout=10) as http:
        yield http, tenancy
    assert tenancy.writer is not None
    await tenancy.writer.close()


class GroupedKeys(DatabaseKeys):
    """The database's keys, with the cache groups given here (as the keys' records
    carry them from the database's `cache_group` column)."""

    def __init__(self, inner: DatabaseKeys, groups: dict[str, str]) -> None:
        self._inner = inner
        self._groups = groups

    async def authenticate(self, header: bytes | None) -> KeyRecord | None:
        record = await self._inner.authenticate(header)
        if record is None:
            return None
        return replace(record, cache_group=self._groups.get(record.id))


async def new_key(tenancy: Tenancy, **limits: Any) -> tuple[str, str]:
    assert tenancy.store is not None
    record, secret = await tenancy.store.create("test", KeyLimits(**limits))
    return record.id, secret


async def usage_rows(database: AsyncEngine) -> list[Any]:
    async with database.connect() as conn:
        return list(await conn.execute(select(usage).order_by(usage.c.id)))


async def refusal_counts(database: AsyncEngine) -> dict[tuple[str, str], int]:
    """Refused requests per (key id, reason), over all minutes."""
    table = usage_refusals
    async with database.connect() as conn:
        rows = await conn.execute(select(table.c.key_id, table.c.reason, table.c.count))
        out: dict[tuple[str, str], int] = {}
        for key_id, reason, count in rows:
            out[(key_id, reason)] = out.get((key_id, reason), 0) + count
        return out


async def dead_letters(database: AsyncEngine) -> list[Any]:
    async with database.connect() as conn:
        statement = select(usage_dead_letter).order_by(usage_dead_letter.c.id)
        return list(await conn.execute(statement))
