"""The whole store's compiles per hour keep how many were recompiles
(``compile_hour_totals.recompiles``): the overview's chart of recompiles over time left
out a function's first compile only, so a warm-up's compiles (cachewatch.warmup, made
ahead of the hot path) showed as a burst of recompiles. Refilled from the stored events.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("compile_hour_totals", sa.Column("recompiles", sa.BigInteger(), nullable=False, server_default="0"))
    from cachewatch.store import rollup

    rollup.rebuild(op.get_bind(), tables=("compile_hour_totals",))


def downgrade() -> None:
    with op.batch_alter_table("compile_hour_totals") as batch:
        batch.drop_column("recompiles")
