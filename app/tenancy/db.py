"""The keys and usage database: where it is, opening it, and migrating it.

SQLite (a file under the data directory, WAL mode) is the default; PostgreSQL, given by
a `postgresql://` URL, is what replicas share. Opening checks what a user's first
mistake looks like (a missing folder, a read-only or locked file) and says so in one
line (`DatabaseError`), so that the server exits with a clear message, not a traceback.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

DB_FILE = "lilac.db"
# SQLite waits this long for another writer's lock before failing.
BUSY_TIMEOUT_MS = 5000


class DatabaseError(Exception):
    """The database cannot be used; the message says why and what to do."""


def default_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir).expanduser() / DB_FILE}"


def async_url(url: str) -> str:
    """The same database through the async drivers (aiosqlite, asyncpg)."""
    parsed = make_url(url)
    driver = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}.get(
        parsed.drivername, parsed.drivername
    )
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return None
    return Path(parsed.database or "")


def create_engine(url: str, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> AsyncEngine:
    engine = create_async_engine(async_url(url), pool_pre_ping=False)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed usage row is on disk, not only in the OS's cache.
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.close()

    return engine


def check_sqlite_file(path: Path, *, must_exist: bool) -> None:
    """A clear error for a database file the server cannot use, before any engine."""
    if must_exist and not path.exists():
        raise DatabaseError(
            f"no keys database at {path}: create a key first (`lilac-serve keys create "
            "--name NAME`) or point --database-url at the database"
        )
    folder = path.parent
    if not folder.is_dir():
        raise DatabaseError(f"the database folder {folder} does not exist")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise DatabaseError(f"the database file {path} is not readable and writable")
    if not path.exists() and not os.access(folder, os.W_OK):
        raise DatabaseError(f"cannot create the database file {path}: {folder} is read-only")


def alembic_config() -> Config:
    config = Config()  # no ini file: logging stays the app's
    config.set_main_option("script_location", "app.tenancy:migrations")
    return config


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _at_head(connection: Connection) -> bool:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    return MigrationContext.configure(connection).get_current_revision() == head


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (a no-op when it is there)."""
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade)
    except Exception as exc:
        raise DatabaseError(f"cannot migrate the database: {_reason(exc)}") from exc


async def check_ready(engine: AsyncEngine) -> None:
    """The schema is at the newest revision and the database takes writes."""
    try:
        async with engine.begin() as conn:
            if not await conn.run_sync(_at_head):
                raise DatabaseError("the database schema is out of date: start the server once")
            # A write (rolled back by the error below) proves the file is not locked.
            await conn.exec_driver_sql("UPDATE api_keys SET name = name WHERE 1 = 0")
    except DatabaseError:
        raise
    except Exception as exc:
        raise DatabaseError(f"the database is not usable: {_reason(exc)}") from exc


async def open_database(url: str, *, must_exist: bool = False) -> AsyncEngine:
    """Check, open and migrate the database; raise `DatabaseError` with the reason."""
    path = sqlite_path(url)
    if path is not None:
        if not path.is_absolute():
            path = path.resolve()
        check_sqlite_file(path, must_exist=must_exist)
    engine = create_engine(url, busy_timeout_ms=1000)
    try:
        await migrate(engine)
        await check_ready(engine)
    finally:
        await engine.dispose()
    return create_engine(url)


def _reason(exc: BaseException) -> str:
    original = getattr(exc, "orig", None) or exc
    if isinstance(original, sqlite3.OperationalError) and "locked" in str(original):
        return "the SQLite file is locked by another process (database is locked)"
    return str(original).splitlines()[0] if str(original) else type(original).__name__
