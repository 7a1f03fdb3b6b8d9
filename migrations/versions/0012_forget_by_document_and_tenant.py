"""answer_costs.read_documents: the documents whose passages each answer read, so deleting a
document finds the answers that carried its text; eval_reports.tenant: whose documents a run
was asked over, so deleting a tenant removes its reports (issue 17: deletion that forgets)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "answer_costs",
        sa.Column(
            "read_documents",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.create_index(
        op.f("ix_answer_costs_read_documents"),
        "answer_costs",
        ["read_documents"],
        postgresql_using="gin",
    )
    op.add_column(
        "eval_reports",
        sa.Column("tenant", sa.String(length=64), server_default="", nullable=False),
    )
    op.create_index(op.f("ix_eval_reports_tenant"), "eval_reports", ["tenant"])


def downgrade() -> None:
    op.drop_index(op.f("ix_eval_reports_tenant"), table_name="eval_reports")
    op.drop_column("eval_reports", "tenant")
    op.drop_index(op.f("ix_answer_costs_read_documents"), table_name="answer_costs")
    op.drop_column("answer_costs", "read_documents")
