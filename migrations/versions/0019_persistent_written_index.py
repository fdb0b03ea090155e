"""The persistent-cache entries recorded as written, in an index of their own: /metrics
counts the distinct keys and sums their bytes on every scrape, and that read went
through every compile of the store to find the few that wrote an entry; it now reads
only those, from the index alone.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

WRITTEN = "persistent_cache = 'written' AND persistent_cache_key IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_persistent_written",
        "compile_events",
        ["persistent_cache_key", "persistent_cache_bytes"],
        postgresql_where=sa.text(WRITTEN),
        sqlite_where=sa.text(WRITTEN),
    )


def downgrade() -> None:
    op.drop_index("ix_persistent_written", table_name="compile_events")
