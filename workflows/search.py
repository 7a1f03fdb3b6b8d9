"""SearchWorkflow: a question in, the best passages out, with per-step timings.

embed the query -> vector search (over-fetching) -> hydrate from Postgres (drops stale points).
The answer workflow builds on the same steps.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.documents import DocumentActivities
    from activities.embedding import EmbeddingActivities
    from activities.vector_index import VectorIndexActivities
    from schemas.search import (
        EmbedQueryInput,
        HydrateInput,
        SearchRequest,
        SearchResponse,
        VectorSearchInput,
    )
    from workflows.calls import call

# Index hits of superseded versions are dropped by hydration; over-fetch so top_k survive.
OVERFETCH = 3


@workflow.defn
class SearchWorkflow:
    @workflow.run
    async def run(self, request: SearchRequest) -> SearchResponse:
        timings: dict[str, float] = {}
        clock = workflow.time()

        def lap(step: str) -> None:
            nonlocal clock
            now = workflow.time()
            timings[step] = round((now - clock) * 1000, 1)
            clock = now

        embedded = await call(
            EmbeddingActivities.embed_query,
            EmbedQueryInput(text=request.query),
            summary="embed the query",
        )
        lap("embed_query")
        found = await call(
            VectorIndexActivities.vector_search,
            VectorSearchInput(
                tenant=request.tenant,
                vector=embedded.vector,
                limit=request.top_k * OVERFETCH,
                document_ids=request.document_ids,
            ),
            summary=f"vector search, top {request.top_k * OVERFETCH}",
        )
        lap("vector_search")
        hydrated = await call(
            DocumentActivities.hydrate_hits,
            HydrateInput(tenant=request.tenant, hits=found.hits, limit=request.top_k),
            summary="resolve hits against active versions in Postgres",
        )
        lap("hydrate")
        return SearchResponse(
            trace_id=workflow.info().workflow_id,
            query=request.query,
            passages=hydrated.passages,
            timings_ms=timings,
        )
