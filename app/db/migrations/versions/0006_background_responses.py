"""Background responses: the events of each one, kept to be read again.

Revision ID: 0006
Revises: 0005_batches
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005_batches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "response_events",
        sa.Column("response_id", sa.String(80), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.String(32), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("response_id", "seq", name=op.f("pk_response_events")),
    )


def downgrade() -> None:
    op.drop_table("response_events")
