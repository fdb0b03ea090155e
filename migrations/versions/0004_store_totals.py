"""Totals per function alone and for the whole store (per cause, per cost bucket), so
that /metrics ranks functions and sums the rest without grouping every per-function
row; filled from the per-function totals already stored.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

STALE_KIND = "stale_capture"


def upgrade() -> None:
    op.create_table(
        "function_compile_totals",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("live_events", sa.BigInteger(), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.Column("cost_seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash"),
    )
    op.create_table(
        "cause_totals",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("compiled", sa.Boolean(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("cost_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "cause", "compiled"),
    )
    op.create_table(
        "cost_bucket_totals",
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("bucket"),
    )
    # The stored per-function totals hold everything the new ones need.
    totals = sa.table(
        "function_totals",
        sa.column("function_hash"),
        sa.column("kind"),
        sa.column("cause"),
        sa.column("compiled"),
        sa.column("events"),
        sa.column("cost_seconds"),
    )
    buckets = sa.table("function_cost_buckets", sa.column("bucket"), sa.column("events"))
    live = totals.c.kind != STALE_KIND
    _fill(
        "function_compile_totals",
        ["function_hash", "events", "live_events", "compiles", "cost_seconds"],
        sa.select(
            totals.c.function_hash,
            sa.func.sum(totals.c.events),
            sa.func.sum(sa.case((live, totals.c.events), else_=0)),
            sa.func.sum(sa.case((sa.and_(live, totals.c.compiled), totals.c.events), else_=0)),
            sa.func.sum(sa.case((live, totals.c.cost_seconds), else_=0.0)),
        ).group_by(totals.c.function_hash),
    )
    _fill(
        "cause_totals",
        ["kind", "cause", "compiled", "events", "cost_seconds"],
        sa.select(
            totals.c.kind,
            totals.c.cause,
            totals.c.compiled,
            sa.func.sum(totals.c.events),
            sa.func.sum(totals.c.cost_seconds),
        ).group_by(totals.c.kind, totals.c.cause, totals.c.compiled),
    )
    _fill(
        "cost_bucket_totals",
        ["bucket", "events"],
        sa.select(buckets.c.bucket, sa.func.sum(buckets.c.events)).group_by(buckets.c.bucket),
    )


def _fill(table: str, columns: list[str], query: sa.Select) -> None:
    """INSERT INTO table (columns) SELECT ..."""
    op.execute(sa.table(table, *map(sa.column, columns)).insert().from_select(columns, query))


def downgrade() -> None:
    op.drop_table("cost_bucket_totals")
    op.drop_table("cause_totals")
    op.drop_table("function_compile_totals")
