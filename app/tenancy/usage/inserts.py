"""How the usage writer's rows reach the database, one statement per group commit:
on a SQLite file through the writer's own child process (app.tenancy.usage.process),
on other SQLite URLs as driver SQL, on PostgreSQL as an insert that skips a
`request_id` already written."""

from __future__ import annotations

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import usage
from app.tenancy.usage.process import ProcessInserts
from app.tenancy.usage.records import SQLITE_INSERT, UsageRecord, record_row, record_values
from app.tenancy.usage.sqlite import direct_path


class UsageInserts:
    """Inserts records into whichever database the writer holds now (a test may swap
    it); the direct connection to a SQLite file is made again for a new engine."""

    def __init__(self) -> None:
        self._direct: ProcessInserts | None = None
        self._direct_for: AsyncEngine | None = None

    async def insert(self, database: AsyncEngine, records: list[UsageRecord]) -> None:
        direct = await self._sqlite_inserts(database)
        if direct is not None:
            # Rows as tuples, one statement, on the writer's own connection: SQLAlchemy's
            # compile, binding and thread hops cost more than the commit's own work.
            await direct.insert(list(map(record_values, records)))
            return
        if database.dialect.name == "sqlite":  # in memory, or with URL options
            async with database.begin() as conn:
                await conn.exec_driver_sql(SQLITE_INSERT, [record_values(r) for r in records])
            return
        statement = pg_insert(usage).on_conflict_do_nothing(index_elements=["request_id"])
        async with database.begin() as conn:
            await conn.execute(statement, [record_row(record) for record in records])

    async def _sqlite_inserts(self, database: AsyncEngine) -> ProcessInserts | None:
        """The direct connection to the file behind `database`, or None when it is not a
        SQLite file."""
        if self._direct_for is not database:
            await self.close()
            self._direct_for = database
            path = direct_path(database)
            self._direct = ProcessInserts(path) if path is not None else None
        return self._direct

    async def close(self) -> None:
        direct, self._direct, self._direct_for = self._direct, None, None
        if direct is not None:
            await direct.close()
