"""The tenancy tests' databases, on both backends: a real SQLite file and a real
PostgreSQL server (one per test session, a database per test)."""

from tests.unit.app.tenancy.conftest import database, pg_server

__all__ = ["database", "pg_server"]
