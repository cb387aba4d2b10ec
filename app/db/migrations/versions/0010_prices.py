"""Prices: each served model's price per million tokens, and each usage row's cost.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prices",
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("effective_from", sa.Float(), nullable=False),
        sa.Column("input_micros", sa.BigInteger(), nullable=False),
        sa.Column("cached_input_micros", sa.BigInteger(), nullable=False),
        sa.Column("output_micros", sa.BigInteger(), nullable=False),
        sa.Column("batch_discount", sa.Integer(), server_default="50", nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("model", "effective_from", name=op.f("pk_prices")),
    )
    # Rows written before prices were kept have no cost (NULL), not a cost of 0.
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("cost_micros", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("cost_micros")
    op.drop_table("prices")
