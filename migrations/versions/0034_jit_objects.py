"""What making a jit object anew for its calls took (``call_stats.jit_object_seconds``),
beside the count of such calls (``slow_calls['new_jit_object']``).

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("jit_object_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_column("jit_object_seconds")
