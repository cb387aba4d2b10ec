"""The tenancy tests' databases, on both backends: a real SQLite file and a real
PostgreSQL server (the session's one, a database per test)."""

from tests.unit.app.tenancy.conftest import database

__all__ = ["database"]
