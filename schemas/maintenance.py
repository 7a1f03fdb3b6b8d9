"""Contracts of maintenance: compaction, and the deletions that forget (runs, whole tenants)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from schemas.common import Contract, TenantId
from schemas.documents import DocumentRef, ForgottenAnswers


class CompactionInput(Contract):
    batch_size: int = Field(
        default=1_000, ge=10, le=100_000, description="Rows or points removed per activity."
    )
    transcript_retention_days: int = Field(
        default=30, ge=1, le=3_650, description="Transcripts older than this are deleted."
    )
    cost_retention_days: int = Field(default=400, ge=1, le=3_650)
    shadow_retention_days: int = Field(default=90, ge=1, le=3_650)
    answer_cache_retention_days: int = Field(default=30, ge=1, le=3_650)
    eval_report_retention_days: int = Field(
        default=365, ge=1, le=3_650, description="The newest report of each set is kept."
    )
    rewrite_max_mb: int = Field(
        default=512,
        ge=0,
        le=1_000_000,
        description="Tables holding tenant text up to this size are rewritten; 0: none.",
    )


class PurgeChunksOutput(Contract):
    removed: int


class PurgeTranscriptsOutput(Contract):
    removed: int


class RewriteTablesOutput(Contract):
    rewritten: list[str] = Field(description="Tables rewritten: no deleted row's bytes left.")
    skipped: dict[str, str] = Field(
        default_factory=dict, description="Tables not rewritten, each with the reason."
    )
    wal_switched: bool = Field(
        default=False, description="A new WAL segment, and the ones before it removed."
    )


class PurgeExpiredOutput(Contract):
    removed: dict[str, int] = Field(description="Rows deleted past their retention, by table.")


class SweepIndexOutput(Contract):
    points_checked: int
    points_removed: int


class IndexStats(Contract):
    points: int


class ChunkStats(Contract):
    chunks: int = Field(description="Every row of `chunks`.")
    live_chunks: int = Field(description="Rows of active or staged versions: what the index holds.")
    tombstoned_documents: int


class CompactionReport(Contract):
    workflow_id: str
    chunks_removed: int = Field(description="Dead rows deleted from Postgres.")
    points_removed: int = Field(description="Index points with no live chunk, deleted.")
    points_before: int
    points_after: int
    chunks_before: int
    chunks_after: int
    live_chunks: int
    counts_match: bool = Field(description="The index holds exactly the live chunks.")
    transcripts_removed: int = Field(default=0, description="Transcripts past their retention.")
    expired_removed: dict[str, int] = Field(
        default_factory=dict,
        description="Cost rows, shadow runs, cached answers and evaluation reports past their "
        "retention, by table.",
    )
    rewritten: list[str] = Field(
        default_factory=list, description="Postgres tables rewritten (rewrite_max_mb)."
    )
    degradations: list[str] = Field(default_factory=list)


class ForgetRunsInput(Contract):
    """Temporal executions to delete, with every run of each id (continue-as-new chains). The
    run `wait_for` (a workflow that asked for its own deletion) is deleted once it has closed;
    runs started after `started_before` are left alone (a conversation started again later).
    With `tenant`, every run of the namespace that names that tenant (its memo, or its id:
    ragkit.ids.tenant_of) is deleted too, except `keep` (the tenant deletion's own run). With
    `wait_for_open`, no run is terminated: each open one is waited for (StillOpen, retried)."""

    workflow_ids: list[str] = Field(max_length=100_000)
    wait_for: str = ""
    started_before: datetime
    tenant: TenantId | None = None
    keep: str = ""
    wait_for_open: bool = Field(
        default=False, description="Wait for every open run to close instead of terminating it."
    )
    searches_of: DocumentRef | None = Field(
        default=None,
        description="Also delete the tenant's search runs whose result returned this document.",
    )
    skip_runs: list[str] = Field(
        default_factory=list,
        max_length=100_000,
        description="Run ids an earlier pass deleted: the server deletes in the background, so "
        "their visibility records can still be listed, and are neither deleted nor counted again.",
    )


class ForgetRunsOutput(Contract):
    workflows: int = Field(description="Workflow ids looked up.")
    runs_deleted: int = Field(description="Runs deleted (open ones terminated first).")
    runs_kept: int = Field(description="Runs started after started_before, left alone.")
    searches_deleted: list[str] = Field(
        default_factory=list, description="Run ids of the search runs deleted (searches_of)."
    )


class TenantRef(Contract):
    tenant: TenantId


class ClosedTenant(Contract):
    """What closing a tenant did: from then on no API key acts as it and no retrieval path
    returns its documents."""

    keys_revoked: int
    documents_tombstoned: int


class PurgedTenant(Contract):
    rows_removed: dict[str, int] = Field(
        description="Rows deleted per table (turns and summaries went with their conversations)."
    )


class TenantDeleted(Contract):
    """The report of DeleteTenantWorkflow: what it removed, everywhere the project keeps text."""

    workflow_id: str
    tenant: str
    keys_revoked: int
    documents: int = Field(description="Documents the tenant had (tombstoned, then removed).")
    rows_removed: dict[str, int]
    runs_deleted: int = Field(description="Temporal runs deleted (open ones terminated first).")
    runs_kept: int = Field(description="Runs started after the deletion began, left alone.")


class OpenAnswersInput(Contract):
    """The tenant's answers and searches running since before `started_before` (a document's
    tombstone): they may have read the document before it was hidden."""

    tenant: TenantId
    started_before: datetime


class ForgetDocumentInput(Contract):
    """The Temporal side of a document's delete, and its late pass (ForgetDocumentWorkflow):
    what the delete's first pass found, and when the document was tombstoned."""

    document: DocumentRef
    first_pass: ForgottenAnswers
    tombstoned_at: datetime


class DocumentForgotten(Contract):
    runs_deleted: int = Field(description="Runs deleted, both passes.")
    late_answers: int = Field(
        description="Answers in flight at the tombstone, forgotten once they had finished."
    )
