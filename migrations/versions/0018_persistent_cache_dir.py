"""The persistent cache directory of each compile that asked it (``persistent_cache_dir``):
an entry recorded as written to a directory and gone from it since was evicted by JAX's
size limit (``jax_compilation_cache_max_size``) or deleted, and the directory audit names
it with the function that wrote it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("persistent_cache_dir", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("persistent_cache_dir")
