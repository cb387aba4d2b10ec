"""The tenancy tables, in SQLAlchemy Core: API keys, metered usage, the usage rows the
database refused (dead letters), the counts of refused requests and the models' prices.

Alembic's migrations (app/db/migrations) create and change them; these
definitions are what the code reads and writes, and what autogenerate compares.
Times are Unix seconds (floats) so both backends store and compare them the same
way; `day` (UTC, `YYYY-MM-DD`) is written with each usage row so reports group by
day without dialect-specific date functions.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("last_used_at", Float, nullable=True),
    Column("revoked_at", Float, nullable=True),
    # Limits; NULL: unlimited.
    Column("rpm", Integer, nullable=True),
    Column("tpm", Integer, nullable=True),
    Column("max_concurrent", Integer, nullable=True),
    Column("priority", Integer, nullable=False, server_default="0"),
    # Its share of the engine against other busy keys (not a tier: `priority` is).
    Column("weight", Float, nullable=False, server_default="1"),
    Column("models", Text, nullable=True),  # JSON list of served names; NULL: all
    # Keys of one group may share the engine's prefix cache; NULL: the key's own.
    Column("cache_group", String(64), nullable=True),
)

# What the HTTP edge lets through to the usage columns (longer is refused there).
MODEL_CHARS = 256
REQUEST_ID_CHARS = 80
CLIENT_REQUEST_ID_CHARS = 36
REASON_CHARS = 40

usage = Table(
    "usage",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    # The response's id, made unique by the server even when the client chose
    # X-Request-Id; the client's id, when it sent one, is `client_request_id`.
    Column("request_id", String(REQUEST_ID_CHARS), nullable=False, unique=True),
    Column("key_id", String(32), nullable=True),
    Column("model", String(MODEL_CHARS), nullable=False),
    Column("endpoint", String(40), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("reasoning_tokens", Integer, nullable=False),
    Column("n", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("queue_ms", Float, nullable=True),
    Column("ttft_ms", Float, nullable=True),
    Column("duration_ms", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("day", String(10), nullable=False),
    Column("client_request_id", String(CLIENT_REQUEST_ID_CHARS), nullable=True),
    # The batch a row's work belongs to (NULL: an interactive request).
    Column("batch_id", String(64), nullable=True),
    # What the row costs, in micro-units of the server's currency, at the prices in
    # force when its request started (NULL: written before prices were kept, or
    # while the prices could not be read).
    Column("cost_micros", BigInteger, nullable=True),
    Index("ix_usage_created_at", "created_at"),
    Index("ix_usage_key_id_created_at", "key_id", "created_at"),
)

# A usage record the database would not take (alone, with the database up): kept whole,
# as JSON, with the database's reason, so it can be billed by hand and never blocks
# the records behind it.
usage_dead_letter = Table(
    "usage_dead_letter",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("request_id", Text, nullable=False),
    Column("record", Text, nullable=False),  # the UsageRecord as JSON
    Column("error", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

# Requests refused before generating (rate limited, queue full, unknown model, bad
# request ...): a count per key, minute and reason, not a row per request, so a blocked
# key cannot grow the database faster than a row per reason a minute.
usage_refusals = Table(
    "usage_refusals",
    metadata,
    Column("key_id", String(32), primary_key=True),
    Column("minute", Float, primary_key=True),  # Unix seconds at the minute's start
    Column("reason", String(REASON_CHARS), primary_key=True),
    Column("day", String(10), nullable=False),
    Column("count", BigInteger().with_variant(Integer, "sqlite"), nullable=False),
    Index("ix_usage_refusals_minute", "minute"),
)

# The price of each served model, per million tokens in micro-units of the server's
# currency (1,000,000 a unit), one row per change: the row in force at a time is the
# model's latest whose `effective_from` is not after it, so a change never reprices
# what was served before it. Batch work is discounted by `batch_discount` percent.
prices = Table(
    "prices",
    metadata,
    Column("model", String(MODEL_CHARS), primary_key=True),
    Column("effective_from", Float, primary_key=True),
    Column("input_micros", BigInteger, nullable=False),
    Column("cached_input_micros", BigInteger, nullable=False),
    Column("output_micros", BigInteger, nullable=False),
    Column("batch_discount", Integer, nullable=False, server_default="50"),
    Column("created_at", Float, nullable=False),
)

# Files (the Files API): one row per file, its content in `file_chunks` rows of about a
# MiB, so that every replica sharing the database reads the same files. A file is
# `uploading` while its chunks are written (each in a short transaction of its own, so
# that a large file never holds SQLite's write lock for long) and `processed` once whole;
# only processed files are seen. `pk` orders the files (pagination's cursor).
FILE_ID_CHARS = 40
FILENAME_CHARS = 255
OWNER_CHARS = 64

files = Table(
    "files",
    metadata,
    Column("pk", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("id", String(FILE_ID_CHARS), nullable=False, unique=True),
    Column("owner", String(OWNER_CHARS), nullable=False),
    Column("purpose", String(32), nullable=False),
    Column("filename", String(FILENAME_CHARS), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("line_count", Integer, nullable=False),
    Column("chunks", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
    Index("ix_files_owner_pk", "owner", "pk"),
    Index("ix_files_status_created_at", "status", "created_at"),
    Index("ix_files_expires_at", "expires_at"),  # the purge of expired files
)

file_chunks = Table(
    "file_chunks",
    metadata,
    Column("file_pk", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

# The models each replica sharing the database serves (one row per replica and served
# name), renewed by the replica's heartbeat: a row past `expires_at` is a replica gone
# without saying so, ignored by the others and pruned. `card` is the model's card as
# `GET /v1/models/{id}` shows it (JSON), `awake` whether it can serve without waking.
REPLICA_ID_CHARS = 32

fleet_models = Table(
    "fleet_models",
    metadata,
    Column("replica_id", String(REPLICA_ID_CHARS), primary_key=True),
    Column("model", String(MODEL_CHARS), primary_key=True),
    Column("awake", Boolean, nullable=False),
    Column("card", Text, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_fleet_models_expires_at", "expires_at"),
)
