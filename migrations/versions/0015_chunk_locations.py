"""chunks.location: the page, slide or rows a chunk spans, which citations show

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A constant default: Postgres adds the column without rewriting the table.
    op.add_column("chunks", sa.Column("location", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    op.drop_column("chunks", "location")
