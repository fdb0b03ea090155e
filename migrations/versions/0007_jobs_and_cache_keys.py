"""Runs carry their job and rank; compile events their persistent-cache key, part by part;
persistent-cache hits and misses are counted beside the events.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("job", sa.String(length=200), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("process_index", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("process_count", sa.Integer(), nullable=True))
        batch_op.create_index("ix_runs_job", ["job"], unique=False)
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cache_key", sa.JSON(), nullable=True))
    op.create_table(
        "persistent_cache_totals",
        sa.Column("result", sa.String(length=8), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("saved_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("result"),
    )
    # Hits and misses were recorded before this revision: count them once.
    events = sa.table("compile_events", sa.column("persistent_cache_hit"), sa.column("cache_time_saved_seconds"))
    result = sa.case((events.c.persistent_cache_hit, "hit"), else_="miss")
    op.execute(
        sa.table("persistent_cache_totals", sa.column("result"), sa.column("events"), sa.column("saved_seconds"))
        .insert()
        .from_select(
            ["result", "events", "saved_seconds"],
            sa.select(result, sa.func.count(), sa.func.coalesce(sa.func.sum(events.c.cache_time_saved_seconds), 0.0))
            .where(events.c.persistent_cache_hit.is_not(None))
            .group_by(result),
        )
    )


def downgrade() -> None:
    op.drop_table("persistent_cache_totals")
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("cache_key")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_job")
        batch_op.drop_column("process_count")
        batch_op.drop_column("process_index")
        batch_op.drop_column("job")
