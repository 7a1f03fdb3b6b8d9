"""Contracts of the retrieval flow."""

from __future__ import annotations

import uuid

from pydantic import Field

from schemas.common import Contract, TenantId


class SearchRequest(Contract):
    tenant: TenantId = "default"
    query: str = Field(min_length=1, max_length=4_000)
    top_k: int = Field(default=5, ge=1, le=100)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1_000)


class EmbedQueryInput(Contract):
    text: str = Field(min_length=1, max_length=4_000)


class EmbedQueryOutput(Contract):
    vector: list[float]
    model: str


class VectorSearchInput(Contract):
    tenant: TenantId
    vector: list[float] = Field(min_length=1, max_length=8_192)
    limit: int = Field(ge=1, le=1_000)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1_000)


class VectorHit(Contract):
    chunk_id: uuid.UUID
    score: float


class VectorSearchOutput(Contract):
    hits: list[VectorHit]


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


class HydrateOutput(Contract):
    passages: list[Passage]
    stale_hits: int = Field(
        description="Index hits dropped because Postgres no longer has them active."
    )


class SearchResponse(Contract):
    trace_id: str
    query: str
    passages: list[Passage]
    timings_ms: dict[str, float]
