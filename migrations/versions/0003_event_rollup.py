"""Per-function event totals (event_rollup), filled from the events already stored.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_rollup",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("compiled", sa.Boolean(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("cost_seconds", sa.Float(), nullable=False),
        sa.Column("first_ts", sa.Float(), nullable=False),
        sa.Column("last_ts", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["function_hash"], ["functions.function_hash"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
        sa.PrimaryKeyConstraint("function_hash", "run_id", "kind", "cause", "compiled", "bucket"),
    )
    with op.batch_alter_table("event_rollup", schema=None) as batch_op:
        batch_op.create_index("ix_event_rollup_run", ["run_id"], unique=False)
    # Existing events: the same totals the writers keep from now on.
    from cachewatch.store import rollup

    rollup.rebuild(op.get_bind())


def downgrade() -> None:
    with op.batch_alter_table("event_rollup", schema=None) as batch_op:
        batch_op.drop_index("ix_event_rollup_run")
    op.drop_table("event_rollup")
