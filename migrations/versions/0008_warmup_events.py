"""Compile events made during a run's warm-up are flagged, so storms leave them out.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warmup", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("warmup")
