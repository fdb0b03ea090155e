"""What tells a first pass from a storm by the calls themselves: whether a compile came
while the program was repeating its work (``compile_events.while_repeating``: since the
function's previous compile, the cache had served a call of a signature compiled before
that one), and which call of the function compiled (``compile_events.call_number``), so
that the calls the cache served after a burst are counted, not guessed from when the
statistics were flushed.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("while_repeating", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("call_number", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.drop_column("call_number")
        batch_op.drop_column("while_repeating")
