"""Usage rows into a SQLite file on one connection, synchronously: what the usage
writer's SQLite process (app.tenancy.usage_sqlite_process) runs.

A group commit is one multi-row `INSERT` in autocommit mode: the statement is its own
transaction, so the insert and the commit are one call into SQLite. A batch beyond
`ROWS_PER_STATEMENT` is several statements in one explicit transaction. The connection
sets what every connection to the file sets (WAL, `synchronous=FULL`: a commit returns
once its rows are on disk).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sqlite3
import sys
from pathlib import Path
from typing import Any

from app.tenancy.sqlite_pragmas import sqlite_pragmas
from app.tenancy.usage import sqlite_insert

# Rows in one INSERT (17 values each: well under SQLite's limit on a statement's values).
ROWS_PER_STATEMENT = 64
THREAD_NAME = "lilac-usage"


def name_native_thread(name: str) -> None:
    """Give the calling thread `name` in the kernel too (Linux: `/proc/PID/task/TID/comm`,
    `top -H`), where Python 3.11 leaves every thread the process's name; elsewhere, or
    when libc has no `prctl`, nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME, at most 15 bytes
    except (OSError, AttributeError):
        return


class SqliteRows:
    """One connection in autocommit mode, opened on first use."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        conn = self._connection()
        if len(rows) <= ROWS_PER_STATEMENT:  # one statement: its own transaction
            conn.execute(sqlite_insert(len(rows)), [value for row in rows for value in row])
            return
        conn.execute("BEGIN")
        try:
            for start in range(0, len(rows), ROWS_PER_STATEMENT):
                chunk = rows[start : start + ROWS_PER_STATEMENT]
                conn.execute(sqlite_insert(len(chunk)), [value for row in chunk for value in row])
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # No file is created here that SQLAlchemy's engine would not create too; a
            # missing folder fails as it does there (sqlite3.OperationalError).
            # Autocommit (isolation_level None): a statement outside BEGIN commits itself.
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None
            )
            try:
                sqlite_pragmas(conn, self._busy_timeout_ms)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
