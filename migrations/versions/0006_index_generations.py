"""index_generations: which physical index serves queries, and which are being built

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "index_generations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("collection", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=96), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("embedding_model", sa.Text(), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("hnsw_m", sa.Integer(), nullable=False),
        sa.Column("hnsw_ef_construct", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.String(length=256), nullable=True),
        sa.Column("points", sa.BigInteger(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_index_generations")),
        sa.UniqueConstraint("name", name=op.f("uq_index_generations_name")),
    )
    op.create_index(op.f("ix_index_generations_collection"), "index_generations", ["collection"])
    # At most one active generation per collection: the switch is one transaction.
    op.create_index(
        "uq_index_generations_one_active",
        "index_generations",
        ["collection"],
        unique=True,
        postgresql_where=sa.text("status = 'active'"),
    )


def downgrade() -> None:
    op.drop_table("index_generations")
