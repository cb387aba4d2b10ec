"""The database tenant data lives in, opened on first use.

With `--auth keys` it is the keys and usage database; with `--auth none` or `static`
it is the same file or URL (`--database-url`, else SQLite in the data directory),
opened (and migrated) only when a request first stores something, so that a server
that never stores anything never creates it."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import ensure_data_dir, open_database, sqlite_path


class TenantDatabase:
    """One connection pool for all tenant data, opened once, on first use."""

    def __init__(self, url: str, engine: AsyncEngine | None = None) -> None:
        self.url = url
        self._engine = engine
        self._opening = asyncio.Lock()

    async def engine(self) -> AsyncEngine:
        """The open, migrated database; raises `DatabaseError` saying why it cannot open."""
        if self._engine is not None:
            return self._engine
        async with self._opening:
            if self._engine is None:
                path = sqlite_path(self.url)
                if path is not None:
                    ensure_data_dir(str(path.expanduser().resolve().parent))
                self._engine = await open_database(self.url)
        return self._engine

    @property
    def opened(self) -> bool:
        return self._engine is not None

    def exists(self) -> bool:
        """Opened, or there to open: a database server's URL, or a SQLite file already
        made. Maintenance (purging expired rows) opens only a database that exists."""
        if self._engine is not None:
            return True
        path = sqlite_path(self.url)
        return path is None or path.expanduser().exists()

    async def close(self, *, owned: bool = True) -> None:
        """Close the pool this object opened (`owned`: not one handed in and shared)."""
        if self._engine is not None and owned:
            await self._engine.dispose()
