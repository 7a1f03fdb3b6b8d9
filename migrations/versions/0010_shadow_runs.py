"""shadow_runs: a candidate configuration's answer beside the live one (R28); answer_costs keeps
the live answer's cited chunks, so the two compare

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "answer_costs",
        sa.Column(
            "cited_chunks",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.create_table(
        "shadow_runs",
        sa.Column("live_trace_id", sa.String(length=256), nullable=False),
        sa.Column("trace_id", sa.String(length=256), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("prompt_id", sa.String(length=64), nullable=False),
        sa.Column("retrieval", sa.String(length=16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("cited_chunks", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("total_ms", sa.Float(), nullable=False),
        sa.Column("engine_seconds", sa.Float(), nullable=False),
        sa.Column("route", sa.String(length=32), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("live_trace_id", name=op.f("pk_shadow_runs")),
    )
    op.create_index(op.f("ix_shadow_runs_created_at"), "shadow_runs", ["created_at"])


def downgrade() -> None:
    op.drop_table("shadow_runs")
    op.drop_column("answer_costs", "cited_chunks")
