"""How JAX serves each compiled signature's calls (``compile_events.call_path``: ``fast``,
its C++ dispatch, or ``slow``, its Python path, with ``slow_reason``) and how many calls
took the Python path, by why (``call_stats.slow_calls``), with a partial index on the
rows that counted some.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("call_path", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("slow_reason", sa.String(length=32), nullable=True))
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slow_calls", sa.JSON(), nullable=True))
    op.create_index(
        "ix_call_stats_slow",
        "call_stats",
        ["function_hash"],
        postgresql_where=sa.text("slow_calls IS NOT NULL"),
        sqlite_where=sa.text("slow_calls IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_call_stats_slow", table_name="call_stats")
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_column("slow_calls")
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("slow_reason")
        batch_op.drop_column("call_path")
