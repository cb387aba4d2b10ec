"""Files: a row per file and its content in chunks of about a MiB.

Revision ID: 0004_files
Revises: 0003_responses
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_files"
down_revision = "0003_responses"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("pk", _ID, nullable=False),
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("line_count", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_files")),
        sa.UniqueConstraint("id", name=op.f("uq_files_id")),
    )
    op.create_index("ix_files_owner_pk", "files", ["owner", "pk"])
    op.create_index("ix_files_status_created_at", "files", ["status", "created_at"])
    op.create_table(
        "file_chunks",
        sa.Column("file_pk", _ID, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("file_pk", "seq", name=op.f("pk_file_chunks")),
    )


def downgrade() -> None:
    op.drop_table("file_chunks")
    op.drop_index("ix_files_status_created_at", table_name="files")
    op.drop_index("ix_files_owner_pk", table_name="files")
    op.drop_table("files")
