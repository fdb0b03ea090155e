"""Compiles and their seconds kept per function and program size
(``compile_size_totals``): the cost model fitted compile seconds against size over
every compile of the store on each diagnosis; it now fits each function from its kept
rows, one a size. Filled from the stored events.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compile_size_totals",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("size", sa.Float(), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("log_seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash", "size"),
    )
    # The logarithms need Python (SQLite has no ln() everywhere): the store's own rollup.
    from cachewatch.store import rollup

    rollup.rebuild(op.get_bind(), tables=("compile_size_totals",))


def downgrade() -> None:
    op.drop_table("compile_size_totals")
