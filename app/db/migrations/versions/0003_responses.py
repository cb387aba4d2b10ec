"""Stored responses: one row per response, scoped to its owner, with its chain's depth,
ancestors and their bytes.

Revision ID: 0003_responses
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_responses"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "stored_responses",
        sa.Column("id", sa.String(80), nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("previous_response_id", sa.String(80), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("ancestors", sa.Text(), nullable=False),
        sa.Column("ancestor_bytes", sa.BigInteger(), nullable=False),
        sa.Column("items_bytes", sa.BigInteger(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("input_items", sa.LargeBinary(), nullable=False),
        sa.Column("output_items", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stored_responses")),
    )
    op.create_index("ix_stored_responses_created_at", "stored_responses", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_stored_responses_created_at", table_name="stored_responses")
    op.drop_table("stored_responses")
