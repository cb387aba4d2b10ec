"""Retention and quotas: the expired-files purge finds files by `expires_at`, and the
stored-bytes quota sums a key's stored responses by `owner`.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_files_expires_at", "files", ["expires_at"])
    op.create_index("ix_stored_responses_owner", "stored_responses", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_stored_responses_owner", table_name="stored_responses")
    op.drop_index("ix_files_expires_at", table_name="files")
