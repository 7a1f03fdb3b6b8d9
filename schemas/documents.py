"""Contracts of document deletion."""

from __future__ import annotations

import uuid

from pydantic import Field

from schemas.common import Contract, TenantId


class DocumentRef(Contract):
    tenant: TenantId
    document_id: uuid.UUID


class TombstoneOutput(Contract):
    source: str
    already_deleted: bool = Field(description="It was deleted before: nothing changed.")


class PurgeDocumentOutput(Contract):
    chunks_removed: int


class DocumentDeleted(Contract):
    """What a delete did. From the moment it returns, no retrieval path sees the document."""

    workflow_id: str
    document_id: uuid.UUID
    source: str
    already_deleted: bool
    chunks_removed: int
