"""A function's page read from indexes: on PostgreSQL the index of a function's events by
time carries what the page counts and charts (kind, cause, compiled, call site, the
three compile times), so counting the function's compiles, its call sites and its
compiles over time read the index alone; and the recompiles that produced a program
compiled before (``identical_to``) get a small index of their own, so a function's
wasted recompiles are found without reading all of its events. At a fleet's year the
busiest function's page read some 100,000 rows from the table four times over.

Rebuilding the first index takes about 10 s per two million events, and holds writes
off the table meanwhile.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

# What a function's page reads besides the function and the time (PostgreSQL's INCLUDE).
PAGE_COLUMNS = ["id", "kind", "cause", "compiled", "call_site", "trace_seconds", "lower_seconds", "compile_seconds"]
WASTED = "identical_to IS NOT NULL"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_compile_events_function_time", table_name="compile_events")
        op.create_index(
            "ix_compile_events_function_time",
            "compile_events",
            ["function_hash", "timestamp"],
            postgresql_include=PAGE_COLUMNS,
        )
    op.create_index(
        "ix_compile_events_wasted",
        "compile_events",
        ["function_hash"],
        postgresql_where=sa.text(WASTED),
        sqlite_where=sa.text(WASTED),
    )


def downgrade() -> None:
    op.drop_index("ix_compile_events_wasted", table_name="compile_events")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_compile_events_function_time", table_name="compile_events")
        op.create_index("ix_compile_events_function_time", "compile_events", ["function_hash", "timestamp"])
