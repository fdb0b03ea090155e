"""A kept burst's description (``kept_bursts.description``): what a listing told of it
(its fix, causes, wasted recompiles and priced padding), kept so that the next listing
reads it instead of reading the burst's recompiles and diffs and pricing it again. Empty
until a listing tells the burst; a burst found again is a new row without one.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("kept_bursts", sa.Column("description", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("kept_bursts", "description")
