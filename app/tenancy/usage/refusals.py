"""Requests refused before generating (rate limited, queue full, unknown model, a bad
request) are not usage rows: they are counted per key, minute and reason in memory, and
the usage writer adds the counts to `usage_refusals` about once a second."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import REASON_CHARS, usage_refusals
from app.tenancy.usage.records import day_of

RefusalKey = tuple[str, float, str]  # key id, minute (Unix seconds), reason


class RefusalCounts:
    """Counts waiting to be written (bounded: a slot per key, minute and reason)."""

    def __init__(self) -> None:
        self._counts: dict[RefusalKey, int] = {}

    def __bool__(self) -> bool:
        return bool(self._counts)

    def count(self, key_id: str, reason: str, at: float) -> None:
        minute = float(int(at // 60) * 60)
        slot = (key_id, minute, reason[:REASON_CHARS])
        self._counts[slot] = self._counts.get(slot, 0) + 1

    async def flush(self, database: AsyncEngine) -> None:
        """Add the counts to the table; on failure they are kept for the next flush and
        the error is raised."""
        counts, self._counts = self._counts, {}
        rows = [
            {"key_id": k, "minute": m, "reason": r, "day": day_of(m), "count": c}
            for (k, m, r), c in counts.items()
        ]
        builder: Callable[..., Any] = (
            pg_insert if database.dialect.name == "postgresql" else sqlite_insert
        )
        statement = builder(usage_refusals)
        statement = statement.on_conflict_do_update(
            index_elements=["key_id", "minute", "reason"],
            set_={"count": usage_refusals.c.count + statement.excluded["count"]},
        )
        try:
            async with database.begin() as conn:
                await conn.execute(statement, rows)
        except Exception:
            for slot, count in counts.items():
                self._counts[slot] = self._counts.get(slot, 0) + count
            raise
