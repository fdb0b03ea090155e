"""The cache itself: host memory around each compile (``host_bytes``, ``host_bytes_before``,
``peak_host_bytes``), what the persistent compilation cache did (``persistent_cache``,
``persistent_cache_reason``, ``persistent_cache_key``, ``persistent_cache_bytes``), and
call-statistics rows that record a release of a function's executables (``released_by``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("host_bytes", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("host_bytes_before", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("peak_host_bytes", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("persistent_cache", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("persistent_cache_reason", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("persistent_cache_key", sa.String(length=512), nullable=True))
        batch_op.add_column(sa.Column("persistent_cache_bytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("released_by", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_column("released_by")
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        for name in (
            "persistent_cache_bytes",
            "persistent_cache_key",
            "persistent_cache_reason",
            "persistent_cache",
            "peak_host_bytes",
            "host_bytes_before",
            "host_bytes",
        ):
            batch_op.drop_column(name)
