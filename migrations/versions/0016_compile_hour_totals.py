"""Compiles per hour and cause kept for the whole store (``compile_hour_totals``): the
dashboard's chart of compiles over time read every compile of the store to draw a
year's weeks; it now reads a few thousand kept rows. Filled from the stored events.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

HOUR = 3600
# The store's bounds on a time stamp (2000 to 2100): a row outside them, which an older
# writer may have taken, is in no hour.
MIN_TIMESTAMP, MAX_TIMESTAMP = 946_684_800.0, 4_102_444_800.0


def upgrade() -> None:
    op.create_table(
        "compile_hour_totals",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("compiles", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "cause"),
    )
    events = sa.table("compile_events", sa.column("timestamp"), sa.column("cause"), sa.column("compiled"))
    # Epoch seconds are positive, so truncation is the floor; SQLite may lack floor().
    if op.get_bind().dialect.name == "sqlite":
        hour = sa.cast(events.c.timestamp / HOUR, sa.BigInteger) * HOUR
    else:
        hour = sa.cast(sa.func.floor(events.c.timestamp / sa.literal(float(HOUR), sa.Float)), sa.BigInteger) * HOUR
    in_bounds = sa.and_(events.c.timestamp >= MIN_TIMESTAMP, events.c.timestamp < MAX_TIMESTAMP)
    hours = sa.select(hour.label("hour"), events.c.cause, sa.func.count().label("compiles")).where(
        events.c.compiled, in_bounds
    )
    op.execute(
        sa.table("compile_hour_totals", sa.column("hour"), sa.column("cause"), sa.column("compiles"))
        .insert()
        .from_select(["hour", "cause", "compiles"], hours.group_by(hour, events.c.cause))
    )


def downgrade() -> None:
    op.drop_table("compile_hour_totals")
