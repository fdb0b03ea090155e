"""Compiles, their seconds and eager run times kept per function and signature
(``signature_totals``): a verdict weighs each signature's compiles against what it saves
per call, and the diagnosis of a fleet's store grouped every event of the store by
signature to do so; it now reads one kept row a signature. Filled from the stored events.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signature_totals",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.Column("cost_seconds", sa.Float(), nullable=False),
        sa.Column("eager_seconds", sa.Float(), nullable=False),
        sa.Column("eager_runs", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash", "signature_hash"),
    )
    e = sa.table(
        "compile_events",
        sa.column("function_hash"),
        sa.column("signature_hash"),
        sa.column("kind"),
        sa.column("compiled"),
        sa.column("trace_seconds"),
        sa.column("lower_seconds"),
        sa.column("compile_seconds"),
        sa.column("eager_run_seconds"),
    )
    signature = sa.func.coalesce(e.c.signature_hash, "")
    cost = (
        sa.func.coalesce(e.c.trace_seconds, 0.0)
        + sa.func.coalesce(e.c.lower_seconds, 0.0)
        + sa.func.coalesce(e.c.compile_seconds, 0.0)
    )
    totals = (
        sa.select(
            e.c.function_hash,
            signature,
            sa.func.sum(sa.case((e.c.compiled, 1), else_=0)),
            sa.func.coalesce(sa.func.sum(cost), 0.0),
            sa.func.coalesce(sa.func.sum(e.c.eager_run_seconds), 0.0),
            sa.func.count(e.c.eager_run_seconds),
        )
        .where(e.c.kind != "stale_capture")
        .group_by(e.c.function_hash, signature)
    )
    columns = ["function_hash", "signature_hash", "compiles", "cost_seconds", "eager_seconds", "eager_runs"]
    op.execute(sa.table("signature_totals", *(sa.column(c) for c in columns)).insert().from_select(columns, totals))


def downgrade() -> None:
    op.drop_table("signature_totals")
