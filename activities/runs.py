"""Temporal run activities: deleting the executions whose histories carried deleted text, so a
deletion also reaches the Temporal server's database (its histories and visibility records)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from ragkit import ids, policies
from schemas.documents import DocumentRef
from schemas.maintenance import ForgetRunsInput, ForgetRunsOutput, OpenAnswersInput
from schemas.search import SearchResponse

STILL_OPEN = "StillOpen"
# The workflow types a document's delete lists (workflows/search.py's and answer.py's classes):
# named, not imported, since activities sit below workflows.
SEARCH_WORKFLOW = "SearchWorkflow"
ANSWER_WORKFLOW = "AnswerWorkflow"
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
        skip = set(request.skip_runs)
        for n, workflow_id in enumerate(request.workflow_ids):
            activity.heartbeat(n)
            async for run in self.client.list_workflows(f"WorkflowId = '{workflow_id}'"):
                if run.run_id in skip:
                    continue
                if run.start_time > request.started_before:
                    kept += 1
                    continue
                deleted += await self._forget(run, request.wait_for, request.wait_for_open)
        workflows = len(request.workflow_ids)
        searches: list[str] = []
        if request.searches_of is not None:
            searches, removed = await self._forget_searches(request.searches_of, request, skip)
            workflows, deleted = workflows + len(searches), deleted + removed
        if request.tenant:
            found, removed = await self._forget_tenant(request)
            workflows, deleted = workflows + found, deleted + removed
        return ForgetRunsOutput(
            workflows=workflows, runs_deleted=deleted, runs_kept=kept, searches_deleted=searches
        )

    @activity.defn
    async def wait_for_open_answers(self, request: OpenAnswersInput) -> None:
        """StillOpen (retried) while an answer or search of the tenant that started before the
        moment still runs: once none does, every run that could have read a document before its
        tombstone has written all it will write."""
        stamp = _visibility_time(request.started_before)
        query = (
            f"(WorkflowType = '{ANSWER_WORKFLOW}' OR WorkflowType = '{SEARCH_WORKFLOW}') "
            f"AND ExecutionStatus = 'Running' AND StartTime <= '{stamp}'"
        )
        async for run in self.client.list_workflows(query, page_size=500):
            if await _names_tenant(run, request.tenant):
                raise ApplicationError(f"{run.id} is still running", type=STILL_OPEN)

    async def _forget_tenant(self, request: ForgetRunsInput) -> tuple[int, int]:
        """Every run started before `started_before` that names the tenant, in its memo (every
        flow started with a tenant keeps it there) or in its id (ragkit.ids.tenant_of: forget
        runs carry no memo). A scan of the namespace's visibility records: a rare, operator-
        started job, so it reads pages rather than keeping an index of runs per tenant."""
        stamp = _visibility_time(request.started_before)
        runs: list[WorkflowExecution] = []
        # Listed whole before any delete: pages are not read from a set that shrinks under them.
        async for run in self.client.list_workflows(f"StartTime <= '{stamp}'", page_size=500):
            activity.heartbeat(f"listed {len(runs)}")
            if run.id != request.keep and await _names_tenant(run, request.tenant or ""):
                runs.append(run)
        deleted = 0
        for n, run in enumerate(runs):
            activity.heartbeat(f"deleted {n} of {len(runs)}")
            deleted += await self._forget(run, request.wait_for, request.wait_for_open)
        return len({run.id for run in runs}), deleted

    async def _forget_searches(
        self, document: DocumentRef, request: ForgetRunsInput, skip: set[str]
    ) -> tuple[list[str], int]:
        """The tenant's search runs whose result returned a passage of `document`: a search
        keeps no record in Postgres, so its result (decoded with this client's converter, the
        codec included) is read to tell. Open or failed searches returned nothing. Returns the
        run ids found (for a later pass's `skip_runs`) and how many this call deleted."""
        stamp = _visibility_time(request.started_before)
        query = (
            f"WorkflowType = '{SEARCH_WORKFLOW}' AND ExecutionStatus = 'Completed' "
            f"AND StartTime <= '{stamp}'"
        )
        found: list[WorkflowExecution] = []
        async for run in self.client.list_workflows(query, page_size=500):
            activity.heartbeat(f"searches read {len(found)}")
            if run.run_id in skip or not await _names_tenant(run, document.tenant):
                continue
            handle = self.client.get_workflow_handle(
                run.id, run_id=run.run_id, result_type=SearchResponse
            )
            try:
                result = await handle.result(follow_runs=False)
            except Exception:  # deleted meanwhile, or sealed with a key no longer held
                continue
            if any(p.document_id == document.document_id for p in result.passages):
                found.append(run)
        deleted = 0
        for run in found:
            deleted += await self._forget(run, request.wait_for, request.wait_for_open)
        return [run.run_id for run in found], deleted

    async def _forget(self, run: WorkflowExecution, wait_for: str, wait: bool = False) -> int:
        """Delete one run, terminating it first if it is open (except `wait_for`, or any with
        `wait`: StillOpen, retried until it has closed)."""
        if run.status == WorkflowExecutionStatus.RUNNING:
            if wait or run.id == wait_for:
                raise ApplicationError(f"{run.id} is still open", type=STILL_OPEN)
            handle = self.client.get_workflow_handle(run.id, run_id=run.run_id)
            try:
                await handle.terminate(reason="its text was deleted")
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
        return await self._delete(run.id, run.run_id)

    async def _delete(self, workflow_id: str, run_id: str) -> int:
        try:
            await self.client.workflow_service.delete_workflow_execution(
                DeleteWorkflowExecutionRequest(
                    namespace=self.client.namespace,
                    workflow_execution=ExecutionRef(workflow_id=workflow_id, run_id=run_id),
                )
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:  # deleted by an earlier attempt
                return 0
            raise
        return 1


async def _names_tenant(run: WorkflowExecution, tenant: str) -> bool:
    named = ids.tenant_of(run.id)
    if named is not None:
        return named == tenant
    try:
        memo = await run.memo()
    except Exception:  # sealed with a key no longer in the ring: not readable, so not ours to say
        activity.logger.warning("cannot read the memo of %s; left alone", run.id)
        return False
    return bool(memo.get("tenant") == tenant)


def _visibility_time(moment: datetime) -> str:
    """A moment as a visibility query compares it (RFC 3339, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
