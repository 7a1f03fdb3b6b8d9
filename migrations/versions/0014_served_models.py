"""served_models: the context length each LLM worker serves, announced at its start

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "served_models",
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("max_model_len", sa.Integer(), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("model", name=op.f("pk_served_models")),
    )


def downgrade() -> None:
    op.drop_table("served_models")
