"""Deferred work (batches): jobs and their lines, and the batch of a usage row.

Revision ID: 0005_batches
Revises: 0004_files
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_batches"
down_revision = "0004_files"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("batch_id", sa.String(64), nullable=True))
    op.create_table(
        "deferred_jobs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("stamps", sa.Text(), server_default="{}", nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deferred_jobs")),
    )
    op.create_index("ix_deferred_jobs_owner_created_at", "deferred_jobs", ["owner", "created_at"])
    op.create_index("ix_deferred_jobs_state", "deferred_jobs", ["state"])
    op.create_table(
        "deferred_lines",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("ok", sa.Integer(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("completion_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "seq", name=op.f("pk_deferred_lines")),
    )
    op.create_index("ix_deferred_lines_job_id_state", "deferred_lines", ["job_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_deferred_lines_job_id_state", table_name="deferred_lines")
    op.drop_table("deferred_lines")
    op.drop_index("ix_deferred_jobs_state", table_name="deferred_jobs")
    op.drop_index("ix_deferred_jobs_owner_created_at", table_name="deferred_jobs")
    op.drop_table("deferred_jobs")
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("batch_id")
