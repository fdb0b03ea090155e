"""Seconds of wasted recompiles kept per function (``function_compile_totals.identical_seconds``):
what ``cachewatch_identical_recompile_seconds_total`` reports, so a prune of old events
never makes the counter go back, and /metrics no longer scans the events for it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("function_compile_totals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("identical_seconds", sa.Float(), nullable=False, server_default="0"))
    # Filled from the events already stored: recompiles (never a first compile) that
    # produced the program the same function compiled before.
    op.execute(
        """
        UPDATE function_compile_totals SET identical_seconds = COALESCE((
            SELECT SUM(COALESCE(e.trace_seconds, 0) + COALESCE(e.lower_seconds, 0) + COALESCE(e.compile_seconds, 0))
            FROM compile_events e JOIN compile_events p ON p.event_id = e.identical_to
            WHERE e.function_hash = function_compile_totals.function_hash
              AND p.function_hash = e.function_hash AND e.cause != 'first_call'
        ), 0)
        """
    )
    with op.batch_alter_table("function_compile_totals", schema=None) as batch_op:
        batch_op.alter_column("identical_seconds", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("function_compile_totals", schema=None) as batch_op:
        batch_op.drop_column("identical_seconds")
