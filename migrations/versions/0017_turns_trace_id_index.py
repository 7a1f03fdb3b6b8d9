"""turns.trace_id indexed: forgetting a deleted document and retention find replies by it

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Without it each lookup (retention keeps the cost row of a stored reply; a forget redacts
    # the replies of the answers that read a document) scans every turn.
    op.create_index(op.f("ix_turns_trace_id"), "turns", ["trace_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_turns_trace_id"), table_name="turns")
