"""Sampled run times per signature in log-spaced buckets (a robust run time per call):
the buckets, signature and sampling setting on call statistics, the per-signature
bucket totals, and the latest run time per call beside each function's call totals;
filled from the call statistics already stored.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signature_hash", sa.String(length=40), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("run_buckets", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("sample_every", sa.Integer(), nullable=True))
    with op.batch_alter_table("function_call_totals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("unsampled_calls", sa.BigInteger(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("run_seconds_per_call", sa.Float(), nullable=True))
    # The defaults only filled the existing rows; the models give every new row its values.
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.alter_column("signature_hash", server_default=None)
    with op.batch_alter_table("function_call_totals", schema=None) as batch_op:
        batch_op.alter_column("unsampled_calls", server_default=None)
    op.create_table(
        "run_time_buckets",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("weight", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash", "signature_hash", "bucket"),
    )
    # Stored samples (each row's at its mean) into buckets, and the call totals valued at them.
    from cachewatch.store import rollup

    rollup.rebuild(op.get_bind(), tables=("function_call_totals", "run_time_buckets"))


def downgrade() -> None:
    op.drop_table("run_time_buckets")
    with op.batch_alter_table("function_call_totals", schema=None) as batch_op:
        batch_op.drop_column("run_seconds_per_call")
        batch_op.drop_column("unsampled_calls")
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_column("sample_every")
        batch_op.drop_column("run_buckets")
        batch_op.drop_column("signature_hash")
