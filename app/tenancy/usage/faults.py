"""Whose fault a failed usage write is, and a one-line reason for logs and dead letters."""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError


def fault(exc: BaseException) -> str | None:
    """Whose failure `exc` is: `row` (a value the database will not store), `database`
    (it cannot be reached or is busy), or None (unknown: PostgreSQL's driver reports a
    too-long string and a lost connection alike)."""
    if isinstance(exc, IntegrityError | DataError | TypeError | ValueError | OverflowError):
        return "row"
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError):  # the direct connection's
        return "row"
    if isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError):
        return "database"  # SQLite's "database is locked" too: retried from the spool
    if isinstance(exc, sqlite3.OperationalError | sqlite3.InterfaceError):
        return "database"
    return None


def reason(exc: BaseException) -> str:
    original = getattr(exc, "orig", None) or exc
    message = str(original).splitlines()[0] if str(original) else ""
    return f"{type(original).__name__}: {message}"[:500]
