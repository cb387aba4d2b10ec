"""Key weight: each key's share of the engine against other busy keys.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The keys there are get weight 1 (an equal share, as before).
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("weight", sa.Float(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("weight")
