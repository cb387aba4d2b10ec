"""Alembic environment: run from code (app.tenancy.db), never from an alembic.ini.
The caller hands over a live connection in `config.attributes["connection"]`."""

from alembic import context

import app.deferred.schema

# Tables defined beside their code register on the same metadata when imported.
import app.storage.response_events
import app.storage.responses_schema  # noqa: F401
from app.tenancy.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through app.tenancy.db.migrate(engine)")
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # ALTER TABLE by copy on SQLite
)
with context.begin_transaction():
    context.run_migrations()
