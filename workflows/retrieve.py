"""Hybrid retrieval, the steps the search and answer workflows share (workflow code, no I/O).

  vector search (local activity: the orchestrator embeds the query and reads the index)
  || keyword search (local activity: Postgres full text) -> fuse with the plan's method and
  weights. No task queue round trip: both are recorded with the workflow task's completion.

Either retriever failing or timing out leaves the other to serve alone; the result says so.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.documents import DocumentActivities
    from activities.retrieval import RetrievalActivities
    from activities.vector_index import VectorIndexActivities
    from ragkit.retrieval import Scored, fuse
    from schemas.search import (
        DenseSearchInput,
        KeywordSearchInput,
        RetrievalLabel,
        RetrievalMode,
        RetrievalPlan,
        VectorHit,
        VectorSearchOutput,
    )
    from workflows.calls import call, degrade, describe, is_cancellation

# Runs started before this patch searched on the index worker's queue (`dense_search`).
LIVE_RETRIEVAL = "live-retrieval"


@dataclass
class Retrieved:
    fused: list[Scored]
    retrieval: RetrievalLabel
    degradations: list[str] = field(default_factory=list)
    embed_seconds: float = 0.0  # the query's encoding, for the answer's cost
    top_similarity: float | None = None  # the best vector match (the router's confidence)


async def retrieve(
    tenant: str,
    query: str,
    plan: RetrievalPlan,
    document_ids: list[uuid.UUID],
    mode: RetrievalMode | None = None,
) -> Retrieved:
    mode = mode or plan.mode
    use_dense, use_keyword = mode in ("hybrid", "dense"), mode in ("hybrid", "keyword")
    dense, keyword = await asyncio.gather(
        _dense(tenant, query, plan.candidates, document_ids) if use_dense else _no_dense(),
        _keyword(tenant, query, plan.candidates, document_ids) if use_keyword else _nothing(),
        return_exceptions=True,
    )
    for outcome in (dense, keyword):
        if isinstance(outcome, BaseException) and is_cancellation(outcome):
            raise outcome
    degradations: list[str] = []
    embed_seconds = 0.0
    dense_hits: list[VectorHit] = []
    if isinstance(dense, BaseException):
        degrade(
            degradations,
            "keyword_only",
            f"vector search failed, keyword search served alone: {_why(dense)}",
        )
    else:
        embed_seconds, dense_hits = dense.embed_seconds, dense.hits
    if isinstance(keyword, BaseException):
        degrade(
            degradations,
            "vector_only",
            f"keyword search failed, vector search served alone: {_why(keyword)}",
        )
        keyword = []
    served_dense = use_dense and not any(d.startswith("vector") for d in degradations)
    served_keyword = use_keyword and not any(d.startswith("keyword") for d in degradations)
    label: RetrievalLabel = (
        "hybrid"
        if served_dense and served_keyword
        else "vector_only"
        if served_dense
        else "keyword_only"
        if served_keyword
        else "none"
    )
    fused = fuse(
        [Scored(str(h.chunk_id), h.score) for h in dense_hits],
        [Scored(str(h.chunk_id), h.score) for h in keyword],
        method=plan.fusion_method,
        dense_weight=plan.dense_weight,
        keyword_weight=plan.keyword_weight,
    )
    return Retrieved(
        fused=fused,
        retrieval=label,
        degradations=degradations,
        embed_seconds=embed_seconds,
        top_similarity=max((h.score for h in dense_hits), default=None),
    )


async def _nothing() -> list[VectorHit]:
    return []


async def _no_dense() -> VectorSearchOutput:
    return VectorSearchOutput(hits=[])


async def _dense(
    tenant: str, query: str, limit: int, document_ids: list[uuid.UUID]
) -> VectorSearchOutput:
    search = DenseSearchInput(tenant=tenant, query=query, limit=limit, document_ids=document_ids)
    if workflow.patched(LIVE_RETRIEVAL):
        return await call(
            RetrievalActivities.search_vectors,
            search,
            summary=f"embed the query and search the vector index, top {limit}",
        )
    return await call(
        VectorIndexActivities.dense_search,
        search,
        summary=f"embed the query and search the vector index, top {limit}",
    )


async def _keyword(
    tenant: str, query: str, limit: int, document_ids: list[uuid.UUID]
) -> list[VectorHit]:
    found = await call(
        DocumentActivities.keyword_search,
        KeywordSearchInput(tenant=tenant, query=query, limit=limit, document_ids=document_ids),
        summary=f"keyword search (Postgres full text), top {limit}",
    )
    return found.hits


def _why(error: BaseException) -> str:
    if isinstance(error, ActivityError):
        return describe(error)
    return f"{type(error).__name__}: {error}"
