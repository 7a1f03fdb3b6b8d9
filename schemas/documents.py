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


class ForgottenAnswers(Contract):
    """What deleting a document removed of the answers that read it (their records in
    Postgres), and the runs whose histories carried its text, for ForgetRunsWorkflow."""

    answer_workflow_ids: list[str] = Field(description="Answers that read the document.")
    rows_removed: dict[str, int] = Field(
        description="Transcripts, cache entries, shadow rows, summaries folded from a reply."
    )
    turns_redacted: int = Field(description="Conversation replies built on the document.")
    conversations: list[str] = Field(
        default_factory=list,
        description="Conversations (their ids) whose replies this pass redacted: their runs are "
        "reloaded, then deleted.",
    )


class DocumentDeleted(Contract):
    """What a delete did. From the moment it returns, no retrieval path sees the document."""

    workflow_id: str
    document_id: uuid.UUID
    source: str
    already_deleted: bool
    chunks_removed: int
    answers_forgotten: int = Field(
        default=0, description="Answers that read the document: records removed, runs deleted."
    )
    turns_redacted: int = 0
    forget_workflow_id: str = Field(
        default="",
        description="The run that deletes the Temporal executions that carried the document's "
        "text (ForgetDocumentWorkflow).",
    )
