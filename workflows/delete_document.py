"""DeleteDocumentWorkflow: a document disappears from every retrieval path, then from storage,
and the answers that read it are forgotten.

  tombstone (Postgres: status deleted; from this commit no retrieval path returns it)
  -> forget the answers that read it (their transcripts, cache entries and shadow rows deleted,
     conversation replies built on it redacted; answer_costs.read_documents finds them)
  -> delete its points from the vector index -> delete its chunks (and its upload) from Postgres
  -> ForgetDocumentWorkflow (abandoned, on the bulk queue): the runs that carried its text, and a
     late pass for the answers that were still running at the tombstone.

Id `delete-<tenant>:<document id>`. A missing document (or another tenant's) is a NotFound
error; deleting twice is harmless (the second run says `already_deleted`). The tombstone row
stays: it makes a repeat harmless, and a new ingest of the same source starts a new version.
If the index or Postgres steps fail after their retries, the tombstone still hides the document;
running the delete again removes the rest. Runs started before the answers were forgotten
(patch `forget-document-answers`) replay without those steps.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.costs import CostActivities
    from activities.documents import DocumentActivities
    from activities.vector_index import VectorIndexActivities
    from ragkit import ids, policies
    from schemas.documents import DocumentDeleted, DocumentRef, ForgottenAnswers
    from schemas.maintenance import ForgetDocumentInput
    from workflows.calls import call, policy_table
    from workflows.forget_document import ForgetDocumentWorkflow

FORGET_DOCUMENT_ANSWERS = "forget-document-answers"


@workflow.defn
class DeleteDocumentWorkflow:
    @workflow.run
    async def run(self, ref: DocumentRef) -> DocumentDeleted:
        marked = await call(
            DocumentActivities.tombstone_document,
            ref,
            summary="mark the document deleted: invisible to retrieval from now on",
        )
        tombstoned_at = workflow.now()
        forgot = ForgottenAnswers(answer_workflow_ids=[], rows_removed={}, turns_redacted=0)
        forgetting = workflow.patched(FORGET_DOCUMENT_ANSWERS)
        if forgetting:
            forgot = await call(
                CostActivities.forget_document_answers,
                ref,
                summary="forget the answers that read the document: transcripts, cache, replies",
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
        forget_id = ""
        if forgetting:
            own = workflow.info()
            forget_id = ids.forget_workflow_id(own.workflow_id, own.run_id)
            await workflow.start_child_workflow(
                ForgetDocumentWorkflow.run,
                ForgetDocumentInput(document=ref, first_pass=forgot, tombstoned_at=tombstoned_at),
                id=forget_id,
                task_queue=policy_table().queue_name(policies.Queue.WORKFLOW),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=f"delete the runs that carried the document's text "
                f"({len(forgot.answer_workflow_ids)} answer(s) so far)",
            )
        return DocumentDeleted(
            workflow_id=workflow.info().workflow_id,
            document_id=ref.document_id,
            source=marked.source,
            already_deleted=marked.already_deleted,
            chunks_removed=purged.chunks_removed,
            answers_forgotten=len(forgot.answer_workflow_ids),
            turns_redacted=forgot.turns_redacted,
            forget_workflow_id=forget_id,
        )
