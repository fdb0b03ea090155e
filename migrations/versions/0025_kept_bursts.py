"""Each run's bursts of recompiles kept (``kept_bursts``, ``kept_burst_events``) with the
runs whose bursts are out of date (``stale_storms``): the storm finder read every run's
recompiles on each listing (seconds at a fleet's year); now only the runs that changed.
Every run starts out stale.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kept_bursts",
        sa.Column("burst_id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("group_key", sa.String(length=1029), nullable=False),
        sa.Column("storm", sa.Boolean(), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("ended", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("burst_id"),
    )
    op.create_index("ix_kept_bursts_newest", "kept_bursts", ["storm", "ended"])
    op.create_index("ix_kept_bursts_run", "kept_bursts", ["run_id"])
    op.create_table(
        "kept_burst_events",
        sa.Column("burst_id", sa.String(length=32), nullable=False),
        sa.Column("event_id", sa.String(length=32), nullable=False),
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("burst_id", "event_id"),
    )
    op.create_index("ix_kept_burst_events_function", "kept_burst_events", ["function_hash"])
    op.create_table(
        "stale_storms",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("marks", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.execute("INSERT INTO stale_storms (run_id, marks) SELECT run_id, 1 FROM runs")


def downgrade() -> None:
    op.drop_table("stale_storms")
    op.drop_index("ix_kept_burst_events_function", table_name="kept_burst_events")
    op.drop_table("kept_burst_events")
    op.drop_index("ix_kept_bursts_run", table_name="kept_bursts")
    op.drop_index("ix_kept_bursts_newest", table_name="kept_bursts")
    op.drop_table("kept_bursts")
