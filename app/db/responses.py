"""The table of stored responses, on the tenancy tables' metadata (so that Alembic's
migrations and autogenerate see it beside them).

Each row is one response, scoped to its owner (a key's id, or the anonymous owner).
A chain (`previous_response_id`) is read in two bounded queries: each row carries its
depth and its ancestors' ids, oldest first (at most `--max-response-chain` of them),
and the bytes of its ancestors' items, so that a chain over its bounds is refused from
one row, before any body is read.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Index, Integer, LargeBinary, String, Table, Text

from app.db.schema import MODEL_CHARS, metadata

# The longest response id the store keeps; a longer one is not found, never a query.
RESPONSE_ID_CHARS = 80
OWNER_CHARS = 32  # a key's id (app.db.schema.api_keys.id), or the anonymous owner
STATUS_CHARS = 20

stored_responses = Table(
    "stored_responses",
    metadata,
    Column("id", String(RESPONSE_ID_CHARS), primary_key=True),
    Column("owner", String(OWNER_CHARS), nullable=False),
    Column("model", String(MODEL_CHARS), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("previous_response_id", String(RESPONSE_ID_CHARS), nullable=True),
    Column("status", String(STATUS_CHARS), nullable=False),
    # 0 for a response that continues nothing; its previous response's depth + 1.
    Column("depth", Integer, nullable=False),
    # JSON array of the ids before this one in its chain, oldest first.
    Column("ancestors", Text, nullable=False),
    # Bytes of the input and output items of the ancestors, and of this row's own.
    Column("ancestor_bytes", BigInteger, nullable=False),
    Column("items_bytes", BigInteger, nullable=False),
    Column("response", LargeBinary, nullable=False),
    Column("input_items", LargeBinary, nullable=False),
    Column("output_items", LargeBinary, nullable=False),
    # Reads are by id (and owner); the purge deletes by age; the stored-bytes quota sums
    # by owner.
    Index("ix_stored_responses_created_at", "created_at"),
    Index("ix_stored_responses_owner", "owner"),
)
