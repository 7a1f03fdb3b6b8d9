"""Contracts of the retrieval flow."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import Field

from schemas.common import Contract, DocumentFilter, TenantId

RetrievalMode = Literal["hybrid", "dense", "keyword"]


class SearchRequest(Contract):
    tenant: TenantId = "default"
    query: str = Field(min_length=1, max_length=4_000)
    top_k: int = Field(default=5, ge=1, le=100)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1_000)
    filter: DocumentFilter = Field(default_factory=DocumentFilter)
    mode: RetrievalMode | None = Field(
        default=None, description="Override the configured retrieval mode (evaluations use it)."
    )


FusionMethod = Literal["zscore", "rrf", "dbsf"]
KeywordRanking = Literal["bm25", "ts_rank"]


class RetrievalPlan(Contract):
    """What the caller's settings decide for retrieval; workflows read no settings."""

    mode: RetrievalMode = "hybrid"
    candidates: int = Field(default=20, ge=1, le=200, description="Hits asked of each retriever.")
    fusion_method: FusionMethod = "zscore"
    dense_weight: float = Field(default=0.7, ge=0, le=1)
    keyword_weight: float = Field(default=0.3, ge=0, le=1)
    dense_min_spread: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="zscore: the least spread (cosine) the dense scores are normalised by "
        "(0: their own standard deviation, as plans made before it had).",
    )
    keyword: KeywordRanking = Field(
        default="ts_rank",
        description="bm25: BM25 in the index (rrf and dbsf fuse there, in one query; Postgres "
        "full text is the fallback); ts_rank: Postgres full text, fused in workflow code.",
    )
    rrf_k: int = Field(default=60, ge=1, le=1_000)


class SearchWorkflowInput(Contract):
    request: SearchRequest
    plan: RetrievalPlan


class DenseSearchInput(Contract):
    """Embed a query and search the index in one step: the vector never enters history.

    With `keyword="bm25"` the index also ranks the query's terms by BM25: returned apart
    (`fusion="none"`, for fusion in workflow code) or fused in the index in one query (`rrf`,
    `dbsf`); `dense=False` asks BM25 alone (no embedding)."""

    tenant: TenantId
    query: str = Field(min_length=1, max_length=8_000)
    limit: int = Field(ge=1, le=1_000)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1_000)
    filter: DocumentFilter = Field(default_factory=DocumentFilter)
    dense: bool = True
    keyword: Literal["none", "bm25"] = "none"
    fusion: Literal["none", "rrf", "dbsf"] = "none"
    rrf_k: int = Field(default=60, ge=1, le=1_000)
    weights: tuple[float, float] | None = Field(
        default=None, description="RRF weights of the dense and the BM25 list."
    )


class KeywordSearchInput(Contract):
    tenant: TenantId
    query: str = Field(min_length=1, max_length=8_000)
    limit: int = Field(ge=1, le=1_000)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1_000)
    filter: DocumentFilter = Field(default_factory=DocumentFilter)


class VectorHit(Contract):
    chunk_id: uuid.UUID
    score: float


class VectorSearchOutput(Contract):
    hits: list[VectorHit]
    embed_seconds: float = Field(default=0.0, description="Time encoding the query (dense).")
    keyword_hits: list[VectorHit] = Field(
        default_factory=list, description="BM25's hits, when asked apart from the dense ones."
    )
    keyword: Literal["none", "bm25", "fused"] = Field(
        default="none",
        description="What the index served besides dense hits: nothing (not asked, or a "
        "generation from before BM25), BM25 hits apart, or `hits` already fused with BM25.",
    )
    top_similarity: float | None = Field(
        default=None, description="The best dense similarity (the router's confidence)."
    )


class HydrateInput(Contract):
    tenant: TenantId
    hits: list[VectorHit] = Field(max_length=1_000)
    limit: int = Field(ge=1, le=100)


class Passage(Contract):
    chunk_id: uuid.UUID
    document_id: uuid.UUID
    version: int
    ordinal: int
    source: str
    title: str
    heading_path: str
    text: str
    score: float
    char_start: int
    char_end: int
    location: str = Field(
        default="",
        max_length=200,
        description="Where a person finds it in the document: `page 3`, `slide 2`, `rows 5-12`.",
    )


class HydrateOutput(Contract):
    passages: list[Passage]
    stale_hits: int = Field(
        description="Index hits dropped because Postgres no longer has them active."
    )


RetrievalLabel = Literal["hybrid", "vector_only", "keyword_only", "none"]


class SearchResponse(Contract):
    trace_id: str
    query: str
    passages: list[Passage]
    retrieval: RetrievalLabel
    degradations: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float]
