"""Where a storm can be, found in an index: the recompiles (compiled, not a first call, not
made ahead of time by cachewatch.warmup) per run and function, and per run and line of
user code, in time order. Finding storms read every recompile of the store, with its wide
row, to keep the few runs and functions where enough of them came close together; now
those are found in these partial indexes and only their rows are read.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

RECOMPILED = "compiled AND cause <> 'first_call' AND kind <> 'warmup'"


def upgrade() -> None:
    where = {"postgresql_where": sa.text(RECOMPILED), "sqlite_where": sa.text(RECOMPILED)}
    op.create_index("ix_recompiles_run_function", "compile_events", ["run_id", "function_hash", "timestamp"], **where)
    op.create_index("ix_recompiles_run_site", "compile_events", ["run_id", "call_site", "timestamp"], **where)


def downgrade() -> None:
    op.drop_index("ix_recompiles_run_site", table_name="compile_events")
    op.drop_index("ix_recompiles_run_function", table_name="compile_events")
