"""SearchWorkflow: a question in, the best passages out, with per-step timings.

hybrid retrieval (workflows/retrieve.py) -> hydrate from Postgres (drops stale points).
The answer workflow builds on the same steps; `mode` lets evaluations compare the retrievers.
"""

from __future__ import annotations

import uuid

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.documents import DocumentActivities
    from schemas.search import HydrateInput, SearchResponse, SearchWorkflowInput, VectorHit
    from workflows.calls import call
    from workflows.retrieve import retrieve


@workflow.defn
class SearchWorkflow:
    @workflow.run
    async def run(self, wf_input: SearchWorkflowInput) -> SearchResponse:
        request, plan = wf_input.request, wf_input.plan
        timings: dict[str, float] = {}
        clock = workflow.time()

        def lap(step: str) -> None:
            nonlocal clock
            now = workflow.time()
            timings[step] = round((now - clock) * 1000, 1)
            clock = now

        found = await retrieve(
            request.tenant, request.query, plan, request.document_ids, request.mode, request.filter
        )
        lap("retrieve")
        passages = []
        if found.fused:
            hydrated = await call(
                DocumentActivities.hydrate_hits,
                HydrateInput(
                    tenant=request.tenant,
                    hits=[VectorHit(chunk_id=uuid.UUID(s.key), score=s.score) for s in found.fused],
                    limit=request.top_k,
                ),
                summary=f"load the top {request.top_k} passages from Postgres",
            )
            passages = hydrated.passages
        lap("hydrate")
        return SearchResponse(
            trace_id=workflow.info().workflow_id,
            query=request.query,
            passages=passages,
            retrieval=found.retrieval,
            degradations=found.degradations,
            timings_ms=timings,
        )
