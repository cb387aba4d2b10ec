"""The usage writer's statements on its own SQLite connection (app.db.sqlite's
`connect`), in a module as light as the child process that runs them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from app.tenancy.usage.records import UsageValue, sqlite_insert

# Rows in one INSERT (19 values each: well under SQLite's limit on a statement's values).
ROWS_PER_STATEMENT = 64


def insert_rows(conn: sqlite3.Connection, rows: Sequence[Sequence[UsageValue]]) -> None:
    """Insert usage rows (each a record's values in `FIELDS` order) and commit: one
    statement, its own transaction, up to `ROWS_PER_STATEMENT` rows; more are several
    statements in one explicit transaction. Returns once the commit has."""
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
