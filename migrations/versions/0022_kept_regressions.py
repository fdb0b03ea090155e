"""Compile-time regressions kept (``compile_regressions``) with the signatures whose kept
regressions are out of date (``stale_regressions``): the diagnosis paired the median
compile seconds of every signature in every run, over every uncached compile of the
store (16 s at a fleet's year); now it finds them again only for the signatures that
changed since, and reads the steepest from an index. Every signature with an uncached
compile starts out stale: the first diagnosis after the upgrade finds them all.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# store/evidence.py's uncached compiles at this revision (MAX_SECONDS: a week).
UNCACHED = (
    "compiled AND compile_seconds IS NOT NULL AND compile_seconds <= 604800.0 "
    "AND signature_hash <> '' AND persistent_cache_hit IS NOT TRUE"
)


def upgrade() -> None:
    op.create_table(
        "compile_regressions",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("run_after", sa.String(length=32), nullable=False),
        sa.Column("run_before", sa.String(length=32), nullable=False),
        sa.Column("seconds_before", sa.Float(), nullable=False),
        sa.Column("seconds_after", sa.Float(), nullable=False),
        sa.Column("steepest_first", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("function_hash", "signature_hash", "run_after"),
    )
    op.create_index(
        "ix_compile_regressions_steepest",
        "compile_regressions",
        ["steepest_first", "function_hash", "signature_hash", "run_after"],
    )
    op.create_table(
        "stale_regressions",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("marks", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("function_hash", "signature_hash"),
    )
    op.execute(
        "INSERT INTO stale_regressions (function_hash, signature_hash, marks) "
        f"SELECT function_hash, signature_hash, count(*) FROM compile_events WHERE {UNCACHED} "
        "GROUP BY function_hash, signature_hash"
    )


def downgrade() -> None:
    op.drop_table("stale_regressions")
    op.drop_index("ix_compile_regressions_steepest", table_name="compile_regressions")
    op.drop_table("compile_regressions")
