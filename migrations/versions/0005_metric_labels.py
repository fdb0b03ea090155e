"""Which functions have their own ``function`` label on /metrics (and which are summed
into ``other``), decided once and kept in the store so that every worker and replica
answers the same.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_labels",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("label", sa.String(length=600), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.PrimaryKeyConstraint("function_hash"),
        sa.UniqueConstraint("label"),
    )


def downgrade() -> None:
    op.drop_table("metric_labels")
