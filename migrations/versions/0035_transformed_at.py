"""The user's line that applied a JAX transformation outside any jit (an eager
``jax.grad(f)(...)``) around a jit's calls served through JAX's Python path
(``call_stats.transformed_at``, beside ``slow_calls['under_transformation']``): the line
where the calls of every jit under it are told as one finding.

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("transformed_at", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_column("transformed_at")
