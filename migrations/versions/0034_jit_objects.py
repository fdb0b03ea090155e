"""What making a jit object anew for its calls took (``call_stats.jit_object_seconds``)
and the user's line that made one (``jit_made_at``), beside the count of such calls
(``slow_calls['new_jit_object']``); and every run's kept
bursts marked stale, as the storm finder's judging changed with it (a first pass over a
few lengths met in random order; storms/diagnosis.py): the next reader judges them again.

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
        batch_op.add_column(sa.Column("jit_made_at", sa.String(length=1024), nullable=True))
    op.execute(
        "INSERT INTO stale_storms (run_id, marks) SELECT run_id, 1 FROM runs "
        "WHERE run_id NOT IN (SELECT run_id FROM stale_storms)"
    )


def downgrade() -> None:
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_column("jit_made_at")
        batch_op.drop_column("jit_object_seconds")
