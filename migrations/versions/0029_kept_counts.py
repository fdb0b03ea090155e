"""How many rows a kept table holds, kept beside it (``kept_counts``): a diagnosis
counted every kept regression for its total on each read (half a million at a fleet's
year). The regressions' count starts as the count of the kept ones.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kept_counts",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.execute("INSERT INTO kept_counts (name, rows) SELECT 'compile_regressions', count(*) FROM compile_regressions")


def downgrade() -> None:
    op.drop_table("kept_counts")
