"""Each job's rank comparison kept (``kept_rank_totals``, ``kept_rank_disagreements``)
with the jobs whose comparison is out of date (``stale_jobs``): the jobs listing, the
dashboard's jobs page and /metrics grouped every compile of the jobs they show on each
read (tens of thousands at a fleet's year); now only the jobs that changed. Every job
with a name starts out stale.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kept_rank_totals",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", "rank"),
    )
    op.create_table(
        "kept_rank_disagreements",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", "rank", "function_hash", "signature_hash"),
    )
    op.create_table(
        "stale_jobs",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("marks", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job"),
    )
    op.execute("INSERT INTO stale_jobs (job, marks) SELECT DISTINCT job, 1 FROM runs WHERE job <> ''")


def downgrade() -> None:
    op.drop_table("stale_jobs")
    op.drop_table("kept_rank_disagreements")
    op.drop_table("kept_rank_totals")
