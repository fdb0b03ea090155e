"""A compile's program linked to another function's compile of the same program
(``same_program_as``, never waste), and why a figure of the program is missing
(``figures_missing``: figure -> reason).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("same_program_as", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("figures_missing", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("figures_missing")
        batch_op.drop_column("same_program_as")
