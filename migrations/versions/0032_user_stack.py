"""The user's frames around each compile's call site (``user_stack``): the line where one
varying value enters several functions (the loop, the call into a library) is the frame
their stacks share, and a finding is told there (cachewatch/storms/findings.py).

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_stack", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("user_stack")
