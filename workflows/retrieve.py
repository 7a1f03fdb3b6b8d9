"""Hybrid retrieval, the steps the search and answer workflows share (workflow code, no I/O).

With BM25 in the index (`plan.keyword == "bm25"`, the default):
  one local activity: the orchestrator embeds the query and asks the index for vector and BM25
  hits, fused there in one query (rrf, dbsf) or returned apart and fused here (zscore).
  The index failing leaves Postgres full text to serve alone (R9).
With Postgres full text (`ts_rank`, and runs from before the `bm25-in-index` patch):
  vector search (local activity) || keyword search (local activity: Postgres full text) -> fuse
  with the plan's method and weights.
No task queue round trip either way: local activities are recorded with the workflow task's
completion. Either retriever failing or timing out leaves the other to serve alone; the result
says so.
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
    from schemas.common import DocumentFilter
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
# Runs started before this patch ranked keywords in Postgres only.
BM25_IN_INDEX = "bm25-in-index"


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
    documents: DocumentFilter | None = None,
) -> Retrieved:
    mode = mode or plan.mode
    use_dense, use_keyword = mode in ("hybrid", "dense"), mode in ("hybrid", "keyword")
    scope = Scope(document_ids, documents or DocumentFilter())
    if use_keyword and plan.keyword == "bm25" and workflow.patched(BM25_IN_INDEX):
        return await _in_index(tenant, query, plan, scope, use_dense)
    dense, keyword = await asyncio.gather(
        _dense(tenant, query, plan.candidates, scope) if use_dense else _no_dense(),
        _keyword(tenant, query, plan.candidates, scope) if use_keyword else _nothing(),
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
    fused = fuse_hits(plan, dense_hits, keyword)
    return Retrieved(
        fused=fused,
        retrieval=label,
        degradations=degradations,
        embed_seconds=embed_seconds,
        top_similarity=max((h.score for h in dense_hits), default=None),
    )


async def _in_index(
    tenant: str, query: str, plan: RetrievalPlan, scope: Scope, use_dense: bool
) -> Retrieved:
    """BM25 in the index: with dense search, fused there in one query (rrf, dbsf) or returned
    apart for z-scores here; alone in keyword mode. Postgres full text is the fallback (R9):
    when the index fails, and on a generation from before BM25 (until a rebuild)."""
    fusion = plan.fusion_method if use_dense and plan.fusion_method != "zscore" else "none"
    degradations: list[str] = []
    try:
        found = await call(
            RetrievalActivities.search_vectors,
            DenseSearchInput(
                tenant=tenant,
                query=query,
                limit=plan.candidates,
                document_ids=scope.document_ids,
                filter=scope.documents,
                dense=use_dense,
                keyword="bm25",
                fusion=fusion,
                rrf_k=plan.rrf_k,
                weights=(plan.dense_weight, plan.keyword_weight),
            ),
            summary=(
                f"embed the query; vector and BM25 search, fused ({fusion}), top {plan.candidates}"
                if fusion != "none"
                else f"search the index (BM25{' and vectors' if use_dense else ''}), "
                f"top {plan.candidates}"
            ),
        )
    except ActivityError as err:
        if is_cancellation(err):
            raise
        degrade(
            degradations,
            "keyword_only",
            f"vector search failed (BM25 with it: one index), Postgres full-text search "
            f"served alone: {_why(err)}",
        )
        return await _postgres_alone(tenant, query, plan, scope, degradations)
    if found.keyword == "fused":
        return Retrieved(
            fused=[Scored(str(h.chunk_id), h.score) for h in found.hits],
            retrieval="hybrid",
            embed_seconds=found.embed_seconds,
            top_similarity=found.top_similarity,
        )
    if found.keyword == "bm25":
        return Retrieved(
            fused=fuse_hits(plan, found.hits, found.keyword_hits),
            retrieval="hybrid" if use_dense else "keyword_only",
            embed_seconds=found.embed_seconds,
            top_similarity=found.top_similarity,
        )
    # A generation from before BM25 answered dense hits only: Postgres ranks the keywords.
    try:
        keyword = await _keyword(tenant, query, plan.candidates, scope)
    except ActivityError as err:
        if is_cancellation(err):
            raise
        degrade(
            degradations,
            "vector_only",
            f"keyword search failed, vector search served alone: {_why(err)}",
        )
        keyword = []
    return Retrieved(
        fused=fuse_hits(plan, found.hits, keyword),
        retrieval="hybrid" if keyword or not degradations else "vector_only",
        degradations=degradations,
        embed_seconds=found.embed_seconds,
        top_similarity=found.top_similarity,
    )


async def _postgres_alone(
    tenant: str, query: str, plan: RetrievalPlan, scope: Scope, degradations: list[str]
) -> Retrieved:
    try:
        keyword = await _keyword(tenant, query, plan.candidates, scope)
    except ActivityError as err:
        if is_cancellation(err):
            raise
        degrade(degradations, "vector_only", f"keyword search failed too: {_why(err)}")
        return Retrieved(fused=[], retrieval="none", degradations=degradations)
    return Retrieved(
        fused=[Scored(str(h.chunk_id), h.score) for h in keyword],
        retrieval="keyword_only",
        degradations=degradations,
    )


def fuse_hits(
    plan: RetrievalPlan, dense: list[VectorHit], keyword: list[VectorHit]
) -> list[Scored]:
    """The two ranked lists as one, with the plan's method and weights (workflow code)."""
    return fuse(
        [Scored(str(h.chunk_id), h.score) for h in dense],
        [Scored(str(h.chunk_id), h.score) for h in keyword],
        method=plan.fusion_method,
        dense_weight=plan.dense_weight,
        keyword_weight=plan.keyword_weight,
        rrf_k=plan.rrf_k,
        dense_min_spread=plan.dense_min_spread,
    )


async def _nothing() -> list[VectorHit]:
    return []


async def _no_dense() -> VectorSearchOutput:
    return VectorSearchOutput(hits=[])


@dataclass(frozen=True)
class Scope:
    """Which documents both retrievers may read: listed ones, and a time range and metadata."""

    document_ids: list[uuid.UUID]
    documents: DocumentFilter


async def _dense(tenant: str, query: str, limit: int, scope: Scope) -> VectorSearchOutput:
    search = DenseSearchInput(
        tenant=tenant,
        query=query,
        limit=limit,
        document_ids=scope.document_ids,
        filter=scope.documents,
    )
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


async def _keyword(tenant: str, query: str, limit: int, scope: Scope) -> list[VectorHit]:
    found = await call(
        DocumentActivities.keyword_search,
        KeywordSearchInput(
            tenant=tenant,
            query=query,
            limit=limit,
            document_ids=scope.document_ids,
            filter=scope.documents,
        ),
        summary=f"keyword search (Postgres full text), top {limit}",
    )
    return found.hits


def _why(error: BaseException) -> str:
    if isinstance(error, ActivityError):
        return describe(error)
    return f"{type(error).__name__}: {error}"
