"""Run status: what became of a workflow the caller started, by its id (the request id)."""

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from gateway.deps import Rag, Tenant
from schemas.gateway import RunStatus

router = APIRouter()


@router.get("/v1/runs/{workflow_id}", response_model=RunStatus)
async def run_status(
    workflow_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,256}$")],
    tenant: Tenant,
    rag: Rag,
) -> RunStatus:
    handle = rag.client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
        memo = await described.memo()
    except RPCError as exc:
        raise HTTPException(404, f"no run {workflow_id!r}") from exc
    if memo.get("tenant") != tenant:  # another tenant's run does not exist for this caller
        raise HTTPException(404, f"no run {workflow_id!r}")
    return RunStatus(
        workflow_id=described.id,
        run_id=described.run_id,
        workflow_type=described.workflow_type,
        status=(described.status or WorkflowExecutionStatus.RUNNING).name.lower(),
        started_at=described.start_time.isoformat() if described.start_time else None,
        closed_at=described.close_time.isoformat() if described.close_time else None,
    )
