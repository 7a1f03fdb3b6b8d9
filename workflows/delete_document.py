"""DeleteDocumentWorkflow: a document disappears from every retrieval path, then from storage.

  tombstone (Postgres: status deleted; from this commit no retrieval path returns it)
  -> delete its points from the vector index -> delete its chunks (and its upload) from Postgres.

Id `delete-<tenant>-<document id>`. A missing document (or another tenant's) is a NotFound
error; deleting twice is harmless (the second run says `already_deleted`). The tombstone row
stays: it makes a repeat harmless, and a new ingest of the same source starts a new version.
If the index or Postgres steps fail after their retries, the tombstone still hides the document;
running the delete again removes the rest.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.documents import DocumentActivities
    from activities.vector_index import VectorIndexActivities
    from schemas.documents import DocumentDeleted, DocumentRef
    from workflows.calls import call


@workflow.defn
class DeleteDocumentWorkflow:
    @workflow.run
    async def run(self, ref: DocumentRef) -> DocumentDeleted:
        marked = await call(
            DocumentActivities.tombstone_document,
            ref,
            summary="mark the document deleted: invisible to retrieval from now on",
        )
        await call(
            VectorIndexActivities.delete_document_points,
            ref,
            summary="delete the document's points from the vector index",
        )
        purged = await call(
            DocumentActivities.purge_document,
            ref,
            summary="delete the document's chunks from Postgres",
        )
        return DocumentDeleted(
            workflow_id=workflow.info().workflow_id,
            document_id=ref.document_id,
            source=marked.source,
            already_deleted=marked.already_deleted,
            chunks_removed=purged.chunks_removed,
        )
