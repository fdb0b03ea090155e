"""Lost events are kept by reason, and a run carries the capabilities its JAX lacked.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("capabilities_off", sa.JSON(), nullable=True))
    # The key grows a column: a new table, the old totals under the reason "unreported".
    op.create_table(
        "run_drops_by_reason",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("dropped", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
        sa.PrimaryKeyConstraint("run_id", "reason"),
    )
    op.execute(
        "INSERT INTO run_drops_by_reason (run_id, reason, dropped) SELECT run_id, 'unreported', dropped FROM run_drops"
    )
    op.drop_table("run_drops")
    op.rename_table("run_drops_by_reason", "run_drops")


def downgrade() -> None:
    op.create_table(
        "run_drops_total",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("dropped", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.execute(
        "INSERT INTO run_drops_total (run_id, dropped) SELECT run_id, SUM(dropped) FROM run_drops GROUP BY run_id"
    )
    op.drop_table("run_drops")
    op.rename_table("run_drops_total", "run_drops")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("capabilities_off")
