"""Every run's kept bursts marked stale: the storm finder's judging changed (a burst of
code that ran once, a top-level line with no loop around it, is a first pass though the
library it calls compiled a program twice inside that one call; storms/first_pass.py),
so the next reader judges them again.

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-30
"""

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "INSERT INTO stale_storms (run_id, marks) SELECT run_id, 1 FROM runs "
        "WHERE run_id NOT IN (SELECT run_id FROM stale_storms)"
    )


def downgrade() -> None:
    pass  # marks only: the next reader judged the bursts again; nothing to take back
