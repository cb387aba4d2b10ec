"""The events of background responses, each row one SSE frame of a run (the store:
app.storage.response_events)."""

from __future__ import annotations

from sqlalchemy import Column, Integer, LargeBinary, String, Table

from app.db.responses import RESPONSE_ID_CHARS
from app.db.schema import metadata

ATTEMPT_CHARS = 32

response_events = Table(
    "response_events",
    metadata,
    Column("response_id", String(RESPONSE_ID_CHARS), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("attempt", String(ATTEMPT_CHARS), nullable=False),
    Column("data", LargeBinary, nullable=False),
)
