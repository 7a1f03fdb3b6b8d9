"""feedback (thumbs up or down per answer) and transcripts (raw prompts and outputs, kept apart
from the logs and purged after their retention) (R21, R24)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("trace_id", sa.String(length=256), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("rating", sa.String(length=8), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("rating IN ('up', 'down')", name=op.f("ck_feedback_rating")),
        sa.ForeignKeyConstraint(
            ["trace_id"],
            ["answer_costs.trace_id"],
            name=op.f("fk_feedback_trace_id_answer_costs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trace_id", name=op.f("pk_feedback")),
    )
    op.create_index(op.f("ix_feedback_tenant"), "feedback", ["tenant"])
    op.create_table(
        "transcripts",
        sa.Column("trace_id", sa.String(length=256), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("messages", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("trace_id", name=op.f("pk_transcripts")),
    )
    op.create_index(op.f("ix_transcripts_created_at"), "transcripts", ["created_at"])


def downgrade() -> None:
    op.drop_table("transcripts")
    op.drop_table("feedback")
