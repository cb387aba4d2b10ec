"""Fleet models: the models each replica sharing the database serves, and their state.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_models",
        sa.Column("replica_id", sa.String(32), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("awake", sa.Boolean(), nullable=False),
        sa.Column("card", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id", "model", name=op.f("pk_fleet_models")),
    )
    op.create_index("ix_fleet_models_expires_at", "fleet_models", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_fleet_models_expires_at", table_name="fleet_models")
    op.drop_table("fleet_models")
