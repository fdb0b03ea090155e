"""Call statistics found by time alone: a view filtered by time (``?since=7d``) read the
statistics of the whole store in a sequential scan, there being an index on the function
and time and on the run but none on time.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_call_stats_time", "call_stats", ["timestamp"])


def downgrade() -> None:
    op.drop_index("ix_call_stats_time", table_name="call_stats")
