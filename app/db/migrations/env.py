"""Alembic environment: run from code (app.db.engine), never from an alembic.ini.
The caller hands over a live connection in `config.attributes["connection"]`."""

from alembic import context

# Every table registers on the same metadata when its module is imported.
from app.db import deferred, events, responses
from app.db.schema import metadata

TABLE_MODULES = (deferred, events, responses)  # imported for their tables

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through app.db.engine.migrate(engine)")
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # ALTER TABLE by copy on SQLite
)
with context.begin_transaction():
    context.run_migrations()
