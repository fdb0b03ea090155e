"""Each signature's median run time kept (``run_time_medians``) with the signatures
whose kept median is out of date (``stale_run_times``): the verdicts of a fleet's store
found every signature's median from its buckets on each read (0.5 s of the diagnosis at
a fleet's year); now only those whose buckets changed. Every signature with buckets
starts out stale.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_time_medians",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("median_bucket", sa.Integer(), nullable=True),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("weight", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("function_hash", "signature_hash"),
    )
    op.create_table(
        "stale_run_times",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("marks", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("function_hash", "signature_hash"),
    )
    op.execute(
        "INSERT INTO stale_run_times (function_hash, signature_hash, marks) "
        "SELECT function_hash, signature_hash, count(*) FROM run_time_buckets GROUP BY function_hash, signature_hash"
    )


def downgrade() -> None:
    op.drop_table("stale_run_times")
    op.drop_table("run_time_medians")
