"""DeleteTenantWorkflow: a tenant deleted whole, everywhere the project keeps its text.

  close (Postgres: API keys revoked, documents tombstoned; from this commit no request acts as
  the tenant and no retrieval path returns its text)
  -> delete its Temporal runs (every run whose memo or id names the tenant; open ones terminated
     first) -> delete its points from the vector index -> delete its rows from Postgres.

The runs go before the rows, so an ingest or a conversation still running is stopped before the
rows it writes are removed. Id `delete-tenant-<tenant>` (ragkit/ids.py); every step is
idempotent, so running the deletion again removes whatever a failed run left. The report says
what each step removed.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.runs import RunActivities
    from activities.tenants import TenantActivities
    from activities.vector_index import VectorIndexActivities
    from schemas.maintenance import ForgetRunsInput, TenantDeleted, TenantRef
    from workflows.calls import call


@workflow.defn
class DeleteTenantWorkflow:
    @workflow.run
    async def run(self, ref: TenantRef) -> TenantDeleted:
        closed = await call(
            TenantActivities.close_tenant,
            ref,
            summary="revoke the tenant's API keys and tombstone its documents",
        )
        own = workflow.info().workflow_id
        runs = await call(
            RunActivities.forget_runs,
            ForgetRunsInput(
                workflow_ids=[], tenant=ref.tenant, keep=own, started_before=workflow.now()
            ),
            summary="delete every Temporal run that names the tenant",
        )
        await call(
            VectorIndexActivities.delete_tenant_points,
            ref,
            summary="delete the tenant's points from the vector index",
        )
        purged = await call(
            TenantActivities.purge_tenant,
            ref,
            summary="delete every row the tenant owns from Postgres",
        )
        workflow.logger.info(
            "deleted tenant %s: %d run(s), rows %s", ref.tenant, runs.runs_deleted, purged
        )
        return TenantDeleted(
            workflow_id=own,
            tenant=ref.tenant,
            keys_revoked=closed.keys_revoked,
            documents=purged.rows_removed.get("documents", 0),
            rows_removed=purged.rows_removed,
            runs_deleted=runs.runs_deleted,
            runs_kept=runs.runs_kept,
        )
