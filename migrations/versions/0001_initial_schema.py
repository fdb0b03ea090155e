"""Initial schema: runs, functions, compile events and call statistics.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 01:42:52.329033
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "functions",
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("qualname", sa.String(length=512), nullable=False),
        sa.Column("module", sa.String(length=512), nullable=False),
        sa.Column("file", sa.String(length=1024), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("function_hash"),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("run_name", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("jax_version", sa.String(length=64), nullable=False),
        sa.Column("jaxlib_version", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=64), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("python_version", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_started_at"), ["started_at"], unique=False)

    op.create_table(
        "call_stats",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("sampled_calls", sa.BigInteger(), nullable=False),
        sa.Column("sampled_seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["function_hash"],
            ["functions.function_hash"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.run_id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.create_index("ix_call_stats_function_time", ["function_hash", "timestamp"], unique=False)
        batch_op.create_index("ix_call_stats_run", ["run_id"], unique=False)

    op.create_table(
        "compile_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=32), nullable=False),
        sa.Column("function_hash", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("explanation", sa.Text(), nullable=False),
        sa.Column("diff", sa.JSON(), nullable=False),
        sa.Column("signature", sa.JSON(), nullable=False),
        sa.Column("signature_hash", sa.String(length=40), nullable=False),
        sa.Column("compiled", sa.Boolean(), nullable=False),
        sa.Column("nested", sa.Boolean(), nullable=False),
        sa.Column("trace_seconds", sa.Float(), nullable=True),
        sa.Column("lower_seconds", sa.Float(), nullable=True),
        sa.Column("compile_seconds", sa.Float(), nullable=True),
        sa.Column("persistent_cache_hit", sa.Boolean(), nullable=True),
        sa.Column("cache_time_saved_seconds", sa.Float(), nullable=True),
        sa.Column("device", sa.String(length=255), nullable=True),
        sa.Column("backend", sa.String(length=64), nullable=True),
        sa.Column("call_site", sa.String(length=1024), nullable=True),
        sa.Column("jaxpr_eqns", sa.Integer(), nullable=True),
        sa.Column("flops", sa.Float(), nullable=True),
        sa.Column("bytes_accessed", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("thread", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["function_hash"],
            ["functions.function_hash"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.run_id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("event_id"),
    )
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.create_index("ix_compile_events_function_time", ["function_hash", "timestamp"], unique=False)
        batch_op.create_index("ix_compile_events_run_time", ["run_id", "timestamp"], unique=False)
        batch_op.create_index("ix_compile_events_time", ["timestamp"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_index("ix_compile_events_time")
        batch_op.drop_index("ix_compile_events_run_time")
        batch_op.drop_index("ix_compile_events_function_time")

    op.drop_table("compile_events")
    with op.batch_alter_table("call_stats", schema=None) as batch_op:
        batch_op.drop_index("ix_call_stats_run")
        batch_op.drop_index("ix_call_stats_function_time")

    op.drop_table("call_stats")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_started_at"))

    op.drop_table("runs")
    op.drop_table("functions")
