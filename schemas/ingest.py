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


class SkippedFiles(Contract):
    """Files a folder walk left out, counted by why and by extension: nothing is skipped in
    silence."""

    kind: str = Field(
        description="unsupported_type (a format we do not read), hidden (a name starting with "
        "'.', or in such a folder), or unreadable (not a regular file)."
    )
    extension: str = Field(default="", description="`.png`, or empty for hidden files.")
    reason: str = Field(default="", description="What to do: `convert to .docx`.")
    count: int = Field(ge=1)
    examples: list[str] = Field(
        default_factory=list, max_length=3, description="A few of the files, to find them by."
    )


def describe_skipped(skipped: list[SkippedFiles]) -> str:
    """`skipped 12 files: 9 .png (unsupported_type), 3 .doc (unsupported_type: convert to
    .docx)`, or '' when nothing was skipped; the CLI, the gateway and the run's details say it."""
    if not skipped:
        return ""
    total = sum(s.count for s in skipped)
    parts = []
    for group in sorted(skipped, key=lambda s: (-s.count, s.extension, s.kind)):
        why = f"{group.kind}: {group.reason}" if group.reason else group.kind
        what = f"{group.count} {group.extension}" if group.extension else f"{group.count}"
        parts.append(f"{what} ({why})")
    return f"skipped {total} file{'s' if total != 1 else ''}: {', '.join(parts)}"


class IngestTotals(Contract):
    """Running counts; the workflow updates them in place between activities."""

    model_config = ConfigDict(extra="ignore", frozen=False)  # as every Contract, but mutable

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
    skipped: list[SkippedFiles] = Field(default_factory=list)
    notes: list[DocumentFailure] = Field(default_factory=list)


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
    skipped: list[SkippedFiles] = Field(
        default_factory=list, description="Files the folder walk left out, and why."
    )
    notes: list[DocumentFailure] = Field(
        default_factory=list,
        description="Documents ingested without part of them (a scanned page of a PDF), and why.",
    )

    @property
    def summary(self) -> str:
        """One line: counts, then what was skipped."""
        t = self.totals
        line = (
            f"{t.documents_ingested} ingested, {t.documents_unchanged} unchanged, "
            f"{t.documents_failed} failed of {t.documents_total}"
        )
        skipped = describe_skipped(self.skipped)
        return f"{line}; {skipped}" if skipped else line


# --- activity contracts -----------------------------------------------------------------------


class DiscoverInput(Contract):
    paths: list[str] = Field(min_length=1, max_length=10_000)


class DiscoverOutput(Contract):
    files: list[str]
    failures: list[DocumentFailure]
    skipped: list[SkippedFiles] = Field(default_factory=list)


class StageBatchInput(Contract):
    tenant: TenantId
    files: list[str] = Field(min_length=1, max_length=500)
    metadata: Metadata = Field(default_factory=dict)


class StageBatchOutput(Contract):
    staged: list[DocumentVersion]
    unchanged: list[str]
    failures: list[DocumentFailure]
    notes: list[DocumentFailure] = Field(
        default_factory=list, description="Staged documents the parser kept only part of."
    )


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
