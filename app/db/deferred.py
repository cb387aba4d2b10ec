"""The deferred-work tables, in the tenant database beside keys and usage.

`deferred_jobs`: one row per job (a batch): its kind, owner, state and the kind's
payload (JSON). `deferred_lines`: one row per unit of work, with its lease (the replica
that runs it and until when) and, once answered, its result line (JSON). Times are Unix
seconds, as in the usage tables."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text

from app.db.schema import metadata

JOB_ID_CHARS = 64
OWNER_CHARS = 64
REPLICA_CHARS = 128

deferred_jobs = Table(
    "deferred_jobs",
    metadata,
    Column("id", String(JOB_ID_CHARS), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("owner", String(OWNER_CHARS), nullable=False),  # whose job: a key id or anonymous
    Column("key_id", String(32), nullable=True),  # the key billed for it (NULL: unmetered)
    Column("state", String(16), nullable=False),
    Column("payload", Text, nullable=False),  # the kind's request, JSON
    Column("result", Text, nullable=True),  # the kind's outcome (file ids, errors), JSON
    Column("stamps", Text, nullable=False, server_default="{}"),  # state -> first time in it
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    # A replica finalizing the job holds it until `lease_until`.
    Column("lease_owner", String(REPLICA_CHARS), nullable=True),
    Column("lease_until", Float, nullable=True),
    Index("ix_deferred_jobs_owner_created_at", "owner", "created_at"),
    Index("ix_deferred_jobs_state", "state"),
)

deferred_lines = Table(
    "deferred_lines",
    metadata,
    Column("job_id", String(JOB_ID_CHARS), primary_key=True),
    Column("seq", Integer, primary_key=True),  # the line's place in the job's input
    Column("state", String(16), nullable=False),
    Column("body", Text, nullable=False),  # the line's request, JSON
    Column("lease_owner", String(REPLICA_CHARS), nullable=True),
    Column("lease_until", Float, nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("result", Text, nullable=True),  # the answered line, JSON
    Column("ok", Integer, nullable=True),  # 1: answered with a success, 0: with an error
    Column("prompt_tokens", Integer, nullable=False, server_default="0"),
    Column("completion_tokens", Integer, nullable=False, server_default="0"),
    Column("finished_at", Float, nullable=True),
    Index("ix_deferred_lines_job_id_state", "job_id", "state"),
)
