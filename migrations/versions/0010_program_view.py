"""What was compiled: program fingerprints and shape on each compile event, and the
programs' texts stored once per fingerprint.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("program_fingerprint", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("lowered_fingerprint", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("identical_to", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("eqns_by_primitive", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("eqns_by_line", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("fusions", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("memory", sa.JSON(), nullable=True))
    op.create_table(
        "programs",
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("stored_at", sa.Float(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("jaxpr", sa.LargeBinary(), nullable=True),
        sa.Column("hlo", sa.LargeBinary(), nullable=True),
        sa.Column("stablehlo", sa.LargeBinary(), nullable=True),
        sa.Column("profile", sa.LargeBinary(), nullable=True),
        sa.Column("left_out", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint"),
    )


def downgrade() -> None:
    op.drop_table("programs")
    with op.batch_alter_table("compile_events", schema=None) as batch_op:
        for name in (
            "memory",
            "fusions",
            "eqns_by_line",
            "eqns_by_primitive",
            "identical_to",
            "lowered_fingerprint",
            "program_fingerprint",
        ):
            batch_op.drop_column(name)
