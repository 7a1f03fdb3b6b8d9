"""Tenant activities: closing a tenant and removing every row it owns from Postgres (issue 17:
a tenant can be deleted whole; DeleteTenantWorkflow runs them around the index and the Temporal
side).

Which rows a tenant owns is read off the schema, not listed here: every table with a `tenant`
column, so a table added later is purged without touching this file. Rows without one (turns,
summaries, chunks) go with their parent by ON DELETE CASCADE.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from ragkit.db import ApiKey, Base, Conversation, Document, DocumentStatus, Summary, Turn
from schemas.maintenance import ClosedTenant, PurgedTenant, TenantRef


def tenant_tables() -> list[Table]:
    """Every table with a tenant column, dependents first (so a cascade never hides a count)."""
    return [t for t in reversed(Base.metadata.sorted_tables) if "tenant" in t.c]


class TenantActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @activity.defn
    def close_tenant(self, request: TenantRef) -> ClosedTenant:
        """Revoke the tenant's API keys and tombstone its documents, in one transaction: from its
        commit no gateway request acts as the tenant and no retrieval path returns its text.
        Idempotent: a second run finds nothing left to close."""
        with self.sessions.begin() as session:
            revoked = session.execute(
                update(ApiKey)
                .where(ApiKey.tenant == request.tenant, ApiKey.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
            tombstoned = session.execute(
                update(Document)
                .where(Document.tenant == request.tenant, Document.status != DocumentStatus.DELETED)
                .values(status=DocumentStatus.DELETED, pending_version=None, pending_hash=None)
            )
        return ClosedTenant(
            keys_revoked=int(revoked.rowcount or 0),  # type: ignore[attr-defined]
            documents_tombstoned=int(tombstoned.rowcount or 0),  # type: ignore[attr-defined]
        )

    @activity.defn
    def purge_tenant(self, request: TenantRef) -> PurgedTenant:
        """Delete every row the tenant owns, in one transaction; returns the count per table.
        Idempotent: a retry after a crash deletes what is left (nothing, once committed)."""
        tenant = request.tenant
        removed: dict[str, int] = {}
        with self.sessions.begin() as session:
            conversations = select(Conversation.id).where(Conversation.tenant == tenant)
            for child in (Turn, Summary):
                removed[child.__tablename__] = int(
                    session.scalar(
                        select(func.count())
                        .select_from(child)
                        .where(child.conversation_id.in_(conversations))
                    )
                    or 0
                )
            for table in tenant_tables():
                result = session.execute(delete(table).where(table.c.tenant == tenant))
                removed[table.name] = int(result.rowcount or 0)  # type: ignore[attr-defined]
        return PurgedTenant(rows_removed=dict(sorted(removed.items())))
