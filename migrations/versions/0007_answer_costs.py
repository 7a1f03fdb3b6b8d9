"""answer_costs: engine seconds and tokens of every answer, per step (R26)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "answer_costs",
        sa.Column("trace_id", sa.String(length=256), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("route", sa.String(length=32), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("engine_seconds", sa.Float(), nullable=False),
        sa.Column("embed_seconds", sa.Float(), nullable=False),
        sa.Column("total_ms", sa.Float(), nullable=False),
        sa.Column("steps", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("trace_id", name=op.f("pk_answer_costs")),
    )
    op.create_index(op.f("ix_answer_costs_tenant"), "answer_costs", ["tenant"])
    op.create_index(op.f("ix_answer_costs_created_at"), "answer_costs", ["created_at"])


def downgrade() -> None:
    op.drop_table("answer_costs")
