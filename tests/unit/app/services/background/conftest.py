"""The background-response tests use the tenancy tests' databases: a real SQLite file and
a real PostgreSQL server."""

from tests.unit.app.tenancy.conftest import database

__all__ = ["database"]
