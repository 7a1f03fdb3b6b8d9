"""Contracts of the ingest flow."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from schemas.common import Contract, DocumentFailure, DocumentVersion, Metadata, TenantId


class IngestRequest(Contract):
    """What a caller asks for: files or folders to ingest for one tenant."""

    tenant: TenantId = "default"
    paths: list[str] = Field(min_length=1, max_length=10_000)
    batch_documents: int = Field(default=8, ge=1, le=500, description="Documents per batch.")
    batches_per_run: int = Field(
        default=50, ge=1, le=10_000, description="Batches per workflow run before continue-as-new."
    )
    metadata: Metadata = Field(
        default_factory=dict,
        description="Key/value pairs given to every document of this ingest (searches filter on "
        "them); a document whose pairs change gets a new version.",
    )


class IngestTotals(Contract):
    """Running counts; the workflow updates them in place between activities."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    documents_total: int = 0
    documents_done: int = 0
    documents_ingested: int = 0
    documents_unchanged: int = 0
    documents_failed: int = 0
    chunks_indexed: int = 0
    passages_embedded: int = 0
    batches_total: int = 0
    batches_done: int = 0


class IngestCarry(Contract):
    """State handed to the next run on continue-as-new."""

    files: list[str]
    next_batch: int
    totals: IngestTotals
    failures: list[DocumentFailure] = Field(default_factory=list)
    degradations: list[str] = Field(default_factory=list)


class IngestWorkflowInput(Contract):
    request: IngestRequest
    carry: IngestCarry | None = None


class IngestProgress(Contract):
    """Answer of the `progress` query."""

    stage: str
    totals: IngestTotals


class IngestResult(Contract):
    tenant: str
    totals: IngestTotals
    failures: list[DocumentFailure]
    degradations: list[str] = Field(
        default_factory=list, description="Fallbacks that were taken, in words."
    )


# --- activity contracts -----------------------------------------------------------------------


class DiscoverInput(Contract):
    paths: list[str] = Field(min_length=1, max_length=10_000)


class DiscoverOutput(Contract):
    files: list[str]
    failures: list[DocumentFailure]


class StageBatchInput(Contract):
    tenant: TenantId
    files: list[str] = Field(min_length=1, max_length=500)
    metadata: Metadata = Field(default_factory=dict)


class StageBatchOutput(Contract):
    staged: list[DocumentVersion]
    unchanged: list[str]
    failures: list[DocumentFailure]


class DocumentsInput(Contract):
    """A set of document versions of one tenant: to index, commit, purge or discard."""

    tenant: TenantId
    documents: list[DocumentVersion] = Field(min_length=1, max_length=500)


class IndexDocumentsOutput(Contract):
    points_upserted: int
    passages_embedded: int


class CommitOutput(Contract):
    committed: list[DocumentVersion]
    chunks_active: int
