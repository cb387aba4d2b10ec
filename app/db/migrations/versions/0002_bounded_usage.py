"""Bounded usage: model names to 256 characters, the client's request id in its own
column, dead letters, counts of refused requests; a cache group per key.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.alter_column(
            "model", existing_type=sa.String(200), type_=sa.String(256), existing_nullable=False
        )
        batch.add_column(sa.Column("client_request_id", sa.String(36), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("cache_group", sa.String(64), nullable=True))
    op.create_table(
        "usage_dead_letter",
        sa.Column("id", _ID, nullable=False),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_dead_letter")),
    )
    op.create_table(
        "usage_refusals",
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("minute", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("count", _ID, nullable=False),
        sa.PrimaryKeyConstraint("key_id", "minute", "reason", name=op.f("pk_usage_refusals")),
    )
    op.create_index("ix_usage_refusals_minute", "usage_refusals", ["minute"])


def downgrade() -> None:
    op.drop_index("ix_usage_refusals_minute", table_name="usage_refusals")
    op.drop_table("usage_refusals")
    op.drop_table("usage_dead_letter")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("cache_group")
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("client_request_id")
        batch.alter_column(
            "model", existing_type=sa.String(256), type_=sa.String(200), existing_nullable=False
        )
