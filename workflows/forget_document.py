"""ForgetDocumentWorkflow: the Temporal side of a document's delete, and its late pass.

Started, abandoned, by DeleteDocumentWorkflow once the document is tombstoned and the answers that
read it are forgotten in Postgres (the first pass):

  tell each conversation that held a redacted reply to reload (it continues as new from Postgres)
  -> delete the runs that carried the document's text: those answers and their shadows, those
     conversations' runs from before the reload, the tenant's searches that returned it
  -> wait until no answer or search of the tenant that started before the tombstone still runs
  -> forget again (the late pass): what those runs wrote after the first pass, in Postgres, then
     their runs, the same way.

Open runs are waited for, never terminated (a turn in flight finishes first). Id
`forget-delete-<tenant>:<document id>-<run>` (ragkit/ids.py). Its history holds ids only.
"""

from __future__ import annotations

import contextlib

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from activities.costs import CostActivities
    from activities.runs import RunActivities
    from ragkit import ids
    from schemas.conversation import ConversationKey
    from schemas.documents import DocumentRef, ForgottenAnswers
    from schemas.maintenance import (
        DocumentForgotten,
        ForgetDocumentInput,
        ForgetRunsInput,
        OpenAnswersInput,
    )
    from workflows.calls import call
    from workflows.conversation import ConversationWorkflow


@workflow.defn
class ForgetDocumentWorkflow:
    @workflow.run
    async def run(self, request: ForgetDocumentInput) -> DocumentForgotten:
        ref, first = request.document, request.first_pass
        deleted, searches = await self._forget_runs(ref, first, [])
        await call(
            RunActivities.wait_for_open_answers,
            OpenAnswersInput(tenant=ref.tenant, started_before=request.tombstoned_at),
            summary="wait for the answers and searches that were running at the tombstone",
        )
        again = await call(
            CostActivities.forget_document_answers,
            ref,
            summary="forget what the answers in flight at the tombstone wrote since",
        )
        seen = set(first.answer_workflow_ids)
        late = again.model_copy(
            update={"answer_workflow_ids": [a for a in again.answer_workflow_ids if a not in seen]}
        )
        # The searches the first pass deleted may still be listed (the server deletes in the
        # background): passed on, so they are not deleted or counted twice.
        late_deleted, _ = await self._forget_runs(ref, late, searches)
        return DocumentForgotten(
            runs_deleted=deleted + late_deleted, late_answers=len(late.answer_workflow_ids)
        )

    async def _forget_runs(
        self, ref: DocumentRef, forgot: ForgottenAnswers, skip_runs: list[str]
    ) -> tuple[int, list[str]]:
        """Reload the conversations whose replies were redacted, then delete the runs. Returns
        how many runs were deleted, and the search runs among them."""
        started_before = workflow.now()
        conversations = [ids.conversation_workflow_id(ref.tenant, c) for c in forgot.conversations]
        for conversation_id, workflow_id in zip(forgot.conversations, conversations, strict=True):
            key = ConversationKey(tenant=ref.tenant, conversation_id=conversation_id)
            # Not running: its runs are all closed, and deleted as they are.
            with contextlib.suppress(FailureError):
                await workflow.get_external_workflow_handle(workflow_id).signal(
                    ConversationWorkflow.reload, key
                )
        answers = forgot.answer_workflow_ids
        removed = await call(
            RunActivities.forget_runs,
            ForgetRunsInput(
                workflow_ids=[*answers, *map(ids.shadow_workflow_id, answers), *conversations],
                started_before=started_before,
                wait_for_open=True,
                searches_of=ref,
                skip_runs=skip_runs,
            ),
            summary="delete the runs that carried the document's text",
        )
        return removed.runs_deleted, removed.searches_deleted
