"""The tenancy tests' databases (a real SQLite file and a real PostgreSQL server) for
the tenant-data store."""

from tests.unit.app.tenancy.conftest import database, pg_server

__all__ = ["database", "pg_server"]
