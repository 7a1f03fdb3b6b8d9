"""Temporal run activities: deleting the executions whose histories carried deleted text, so a
deletion also reaches the Temporal server's database (its histories and visibility records)."""

from __future__ import annotations

import re

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from ragkit import policies
from schemas.maintenance import ForgetRunsInput, ForgetRunsOutput

STILL_OPEN = "StillOpen"
# What ragkit/ids.py puts in a workflow id: nothing a visibility query would read as syntax.
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,400}$")


class RunActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn
    async def forget_runs(self, request: ForgetRunsInput) -> ForgetRunsOutput:
        """Delete every run of each workflow id started up to `started_before` (an open one is
        terminated first, except `wait_for`, which is waited for: StillOpen, retried). Runs
        already gone are not an error, so a retry after a crash finishes the job."""
        for workflow_id in request.workflow_ids:
            if not _SAFE_ID.match(workflow_id):
                raise ApplicationError(
                    f"not a workflow id of this project: {workflow_id[:80]!r}",
                    type=policies.INVALID_INPUT,
                    non_retryable=True,
                )
        deleted = kept = 0
        for n, workflow_id in enumerate(request.workflow_ids):
            activity.heartbeat(n)
            async for run in self.client.list_workflows(f"WorkflowId = '{workflow_id}'"):
                if run.start_time > request.started_before:
                    kept += 1
                    continue
                if run.status == WorkflowExecutionStatus.RUNNING:
                    if workflow_id == request.wait_for:
                        raise ApplicationError(f"{workflow_id} is still open", type=STILL_OPEN)
                    handle = self.client.get_workflow_handle(workflow_id, run_id=run.run_id)
                    try:
                        await handle.terminate(reason="its text was deleted")
                    except RPCError as exc:
                        if exc.status != RPCStatusCode.NOT_FOUND:
                            raise
                deleted += await self._delete(workflow_id, run.run_id)
        return ForgetRunsOutput(
            workflows=len(request.workflow_ids), runs_deleted=deleted, runs_kept=kept
        )

    async def _delete(self, workflow_id: str, run_id: str) -> int:
        try:
            await self.client.workflow_service.delete_workflow_execution(
                DeleteWorkflowExecutionRequest(
                    namespace=self.client.namespace,
                    workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                )
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:  # deleted by an earlier attempt
                return 0
            raise
        return 1
