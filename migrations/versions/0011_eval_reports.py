"""eval_reports: every evaluation run's metrics and case outcomes (R25)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "eval_reports",
        sa.Column("workflow_id", sa.String(length=256), nullable=False),
        sa.Column("set_name", sa.String(length=64), nullable=False),
        sa.Column("metrics", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("outcomes", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("workflow_id", name=op.f("pk_eval_reports")),
    )
    op.create_index(op.f("ix_eval_reports_set_name"), "eval_reports", ["set_name"])


def downgrade() -> None:
    op.drop_table("eval_reports")
