"""The keys and usage database: where it is, opening it, and migrating it.

SQLite (a file under the data directory, WAL mode) is the default; PostgreSQL, given by
a `postgresql://` URL, is what replicas share. Opening checks what a user's first
mistake looks like (a missing folder, a read-only or locked file) and says so in one
line (`DatabaseError`), so that the server exits with a clear message, not a traceback.

Migrating holds a lock, so that replicas starting together on one database take turns:
the first brings the schema to the newest revision, the others then find it there. On
PostgreSQL it is a transaction-level advisory lock (released by the commit, or by the
server if the process dies); on SQLite an exclusive `flock` on a file beside the
database.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.sqlite import BUSY_TIMEOUT_MS, sqlite_pragmas

DB_FILE = "lilac.db"
# Any fixed number: what every lilac-serve agrees to lock while it migrates.
MIGRATION_LOCK_ID = 0x6C696C6163  # "lilac"
# How long a replica waits for another's migration before giving up.
MIGRATION_LOCK_TIMEOUT_S = 300


class DatabaseError(Exception):
    """The database cannot be used; the message says why and what to do."""


def default_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir).expanduser() / DB_FILE}"


def ensure_data_dir(data_dir: str) -> Path:
    """The data directory, made (with its parents, private to the user) if missing."""
    path = Path(data_dir).expanduser()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"cannot create the data directory {path}: {exc}") from exc
    return path


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
            sqlite_pragmas(dbapi_conn, busy_timeout_ms)

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
    config.set_main_option("script_location", "app.db:migrations")
    return config


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _at_head(connection: Connection) -> bool:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    return MigrationContext.configure(connection).get_current_revision() == head


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (a no-op when it is there), one process
    at a time."""
    try:
        async with _sqlite_migration_lock(engine), engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Advisory locks obey lock_timeout; both end with this transaction.
                timeout_ms = MIGRATION_LOCK_TIMEOUT_S * 1000
                await conn.exec_driver_sql(f"SET LOCAL lock_timeout = {timeout_ms}")
                await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
            await conn.run_sync(_upgrade)
    except DatabaseError:
        raise
    except Exception as exc:
        raise DatabaseError(f"cannot migrate the database: {_reason(exc)}") from exc


@contextlib.asynccontextmanager
async def _sqlite_migration_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    """An exclusive flock on `<database>.migrate.lock` (no-op on other databases). The
    kernel releases it if the process dies, so a crashed migration blocks nobody."""
    path = sqlite_path(engine.url.render_as_string(hide_password=False))
    if path is None or not str(path) or str(path) == ":memory:":
        yield
        return
    lock_path = path.resolve().with_name(path.name + ".migrate.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise DatabaseError(f"cannot open the migration lock {lock_path}: {exc}") from exc
    try:
        await _flock(fd, lock_path)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


async def _flock(fd: int, lock_path: Path) -> None:
    """Take the lock without blocking the event loop: try, sleep a little, try again."""
    deadline = asyncio.get_running_loop().time() + MIGRATION_LOCK_TIMEOUT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if asyncio.get_running_loop().time() > deadline:
                raise DatabaseError(
                    f"another process has held the migration lock {lock_path} for "
                    f"{MIGRATION_LOCK_TIMEOUT_S} s"
                ) from None
            await asyncio.sleep(0.05)


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
