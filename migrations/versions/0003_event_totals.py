"""Totals beside the events (per function and cause, per cost bucket, per run) and the
call statistics (per function), filled from the rows already stored.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "function_totals",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("compiled", sa.Boolean(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("cost_seconds", sa.Float(), nullable=False),
        sa.Column("first_ts", sa.Float(), nullable=False),
        sa.Column("last_ts", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash", "kind", "cause", "compiled"),
    )
    op.create_table(
        "function_cost_buckets",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash", "bucket"),
    )
    op.create_table(
        "run_totals",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.Column("cost_seconds", sa.Float(), nullable=False),
        sa.Column("first_ts", sa.Float(), nullable=False),
        sa.Column("last_ts", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "function_call_totals",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("sampled_calls", sa.BigInteger(), nullable=False),
        sa.Column("sampled_seconds", sa.Float(), nullable=False),
        sa.Column("run_seconds", sa.Float(), nullable=False),
        sa.Column("unvalued_calls", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash"),
    )
    op.create_table(
        "run_drops",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("dropped", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
        sa.PrimaryKeyConstraint("run_id"),
    )
    # Existing events: the same totals the writers keep from now on. The call totals are
    # filled by 0006, whose run-time buckets they are computed from.
    from cachewatch.store import rollup

    rollup.rebuild(op.get_bind(), tables=("function_totals", "function_cost_buckets", "run_totals"))


def downgrade() -> None:
    op.drop_table("run_drops")
    op.drop_table("function_call_totals")
    op.drop_table("run_totals")
    op.drop_table("function_cost_buckets")
    op.drop_table("function_totals")
