"""An index of each run's compiles by function and signature: the jobs pages and
/metrics compare the ranks of the newest jobs by what each compiled, which read every
event row of those runs (a sequential scan of the whole table at a fleet's size, 140 ms
at a tenth of it); the index answers it alone (25 ms).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_compile_events_run_signature",
        "compile_events",
        ["run_id", "function_hash", "signature_hash", "compiled"],
    )


def downgrade() -> None:
    op.drop_index("ix_compile_events_run_signature", table_name="compile_events")
