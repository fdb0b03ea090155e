"""Program size, eager-versus-compiled run timing, and captured globals per event.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hlo_ops", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("compiled_run_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("eager_run_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("captured", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("captured")
        batch_op.drop_column("eager_run_seconds")
        batch_op.drop_column("compiled_run_seconds")
        batch_op.drop_column("hlo_ops")
