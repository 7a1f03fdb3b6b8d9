"""DeleteDocumentWorkflow: a document disappears from every retrieval path, then from storage,
and the answers that read it are forgotten.

  tombstone (Postgres: status deleted; from this commit no retrieval path returns it)
  -> forget the answers that read it (their transcripts, cache entries and shadow rows deleted,
     conversation replies built on it redacted; answer_costs.read_documents finds them)
  -> delete its points from the vector index -> delete its chunks (and its upload) from Postgres
  -> ForgetRunsWorkflow (abandoned, on the bulk queue) deletes those answers' Temporal runs, the
     conversations' runs that held their replies (told to reload first), and the tenant's
     searches that returned the document.

Id `delete-<tenant>:<document id>`. A missing document (or another tenant's) is a NotFound
error; deleting twice is harmless (the second run says `already_deleted`). The tombstone row
stays: it makes a repeat harmless, and a new ingest of the same source starts a new version.
If the index or Postgres steps fail after their retries, the tombstone still hides the document;
running the delete again removes the rest. Runs started before the answers were forgotten
(patch `forget-document-answers`) replay without those steps.
"""

from __future__ import annotations

import contextlib

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from activities.costs import CostActivities
    from activities.documents import DocumentActivities
    from activities.vector_index import VectorIndexActivities
    from ragkit import ids, policies
    from schemas.conversation import ConversationKey
    from schemas.documents import DocumentDeleted, DocumentRef, ForgottenAnswers
    from schemas.maintenance import ForgetRunsInput
    from workflows.calls import call, policy_table
    from workflows.conversation import ConversationWorkflow
    from workflows.forget import ForgetRunsWorkflow

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
        forget_id = await self._forget_runs(ref, forgot) if forgetting else ""
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

    async def _forget_runs(self, ref: DocumentRef, forgot: ForgottenAnswers) -> str:
        """Hand the answers' runs (and their shadows) to ForgetRunsWorkflow, abandoned: it
        outlives this run. Conversations that held a redacted reply are told to reload from
        Postgres (a new run), so their runs from before can go too, and so do the tenant's
        searches that returned the document. Nothing is terminated: an open run is waited for
        (a turn in flight finishes first)."""
        own = workflow.info()
        answers = forgot.answer_workflow_ids
        forget_id = ids.forget_workflow_id(own.workflow_id, own.run_id)
        started_before = workflow.now()
        conversations = [ids.conversation_workflow_id(ref.tenant, c) for c in forgot.conversations]
        for conversation_id, workflow_id in zip(forgot.conversations, conversations, strict=True):
            key = ConversationKey(tenant=ref.tenant, conversation_id=conversation_id)
            # Not running: its runs are all closed, and deleted as they are.
            with contextlib.suppress(FailureError):
                await workflow.get_external_workflow_handle(workflow_id).signal(
                    ConversationWorkflow.reload, key
                )
        await workflow.start_child_workflow(
            ForgetRunsWorkflow.run,
            ForgetRunsInput(
                workflow_ids=[
                    *answers,
                    *map(ids.shadow_workflow_id, answers),
                    *conversations,
                ],
                started_before=started_before,
                wait_for_open=True,
                searches_of=ref,
            ),
            id=forget_id,
            task_queue=policy_table().queue_name(policies.Queue.WORKFLOW),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            static_summary=f"delete the runs of {len(answers)} answer(s) and the searches that "
            "read the document",
        )
        return forget_id
