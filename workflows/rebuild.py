"""RebuildIndexWorkflow: a new index generation from the Postgres chunk store, switched in with
no downtime (R18).

  begin (a `building` generation: every write now reaches it too) -> copy the live chunks in
  batches (embedded from Postgres, the source of truth: no re-parsing) -> verify (it holds
  exactly the live chunks; sample queries find results) -> activate (one transaction: queries
  move to it, the old one is retired) -> grace period -> drop the old generation.

Queries are served from the old generation until the switch; ingests and deletes during the
rebuild reach both. A failed copy or verification drops the half-built generation and fails the
run; the old one never stopped serving. A killed worker resumes at the batch it was copying.
Id `rebuild-<collection>`: one rebuild at a time (the schedule's overlap policy skips, too).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.vector_index import VectorIndexActivities
    from schemas.rebuild import (
        CopyChunksInput,
        GenerationNameInput,
        RebuildInput,
        RebuildProgress,
        RebuildReport,
        VerifyInput,
    )
    from workflows.calls import call, describe


@workflow.defn
class RebuildIndexWorkflow:
    def __init__(self) -> None:
        self.stage = "starting"
        self.copied = 0

    @workflow.query
    def progress(self) -> RebuildProgress:
        return RebuildProgress(stage=self.stage, chunks_copied=self.copied)

    @workflow.run
    async def run(self, request: RebuildInput) -> RebuildReport:
        ref = await call(
            VectorIndexActivities.begin_generation,
            request,
            summary="create a new index generation; writes reach it from now on",
        )
        try:
            self.stage = "copying"
            after = None
            while True:
                batch = await call(
                    VectorIndexActivities.copy_chunks,
                    CopyChunksInput(name=ref.name, after=after, batch_size=request.batch_size),
                    summary=f"embed the next {request.batch_size} chunks into {ref.name}",
                )
                self.copied += batch.copied
                after = batch.last
                if batch.copied < request.batch_size:
                    break
            self.stage = "verifying"
            verified = await call(
                VectorIndexActivities.verify_generation,
                VerifyInput(name=ref.name, sample_queries=request.sample_queries),
                summary=f"check {ref.name} holds every live chunk and answers queries",
            )
        except ActivityError as err:
            self.stage = "failed"
            await call(
                VectorIndexActivities.drop_generation,
                GenerationNameInput(name=ref.name),
                summary=f"drop the unfinished {ref.name}; {ref.previous} keeps serving",
            )
            raise ApplicationError(
                f"rebuild failed, {ref.previous} keeps serving: {describe(err)}",
                type="RebuildFailed",
                non_retryable=True,
            ) from err
        self.stage = "switching"
        await call(
            VectorIndexActivities.activate_generation,
            GenerationNameInput(name=ref.name),
            summary=f"switch queries to {ref.name}",
        )
        self.stage = "grace"
        await workflow.sleep(timedelta(seconds=request.grace_seconds))
        self.stage = "dropping"
        dropped = True
        try:
            await call(
                VectorIndexActivities.drop_generation,
                GenerationNameInput(name=ref.previous),
                summary=f"drop the retired {ref.previous}",
            )
        except ActivityError as err:
            workflow.logger.warning("could not drop %s: %s", ref.previous, describe(err))
            dropped = False
        self.stage = "done"
        return RebuildReport(
            workflow_id=workflow.info().workflow_id,
            previous=ref.previous,
            active=ref.name,
            chunks_copied=self.copied,
            points=verified.points_new,
            verified=verified,
            dropped_previous=dropped,
        )
