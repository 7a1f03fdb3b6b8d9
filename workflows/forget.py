"""ForgetRunsWorkflow: the Temporal side of a deletion (issue 17: deletion that forgets).

Deleting a conversation removes its rows from Postgres at once (ConversationWorkflow's `delete`),
then starts this workflow, abandoned, on the bulk queue: once the conversation's run has closed, it
deletes every execution whose history carried the conversation's text (the conversation's runs,
its turns' answers and their shadow runs) through the workflow service. Its own history holds
only workflow ids, and its result says how many runs it removed.

Id `forget-<workflow id>` (ragkit/ids.py).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.runs import RunActivities
    from schemas.maintenance import ForgetRunsInput, ForgetRunsOutput
    from workflows.calls import call


@workflow.defn
class ForgetRunsWorkflow:
    @workflow.run
    async def run(self, request: ForgetRunsInput) -> ForgetRunsOutput:
        removed = await call(
            RunActivities.forget_runs,
            request,
            summary=f"delete {len(request.workflow_ids)} workflow(s) that carried deleted text",
        )
        workflow.logger.info(
            "deleted %d run(s) of %d workflow(s), kept %d started later",
            removed.runs_deleted,
            removed.workflows,
            removed.runs_kept,
        )
        return removed
