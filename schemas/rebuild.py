"""Contracts of the index rebuild (R18)."""

from __future__ import annotations

import uuid

from pydantic import Field

from schemas.common import Contract


class RebuildInput(Contract):
    batch_size: int = Field(default=256, ge=8, le=10_000, description="Chunks copied per step.")
    hnsw_m: int = Field(default=16, ge=4, le=64)
    hnsw_ef_construct: int = Field(default=100, ge=8, le=2_048)
    grace_seconds: float = Field(
        default=3_600, ge=0, le=30 * 86_400, description="The old generation stays this long."
    )
    sample_queries: int = Field(default=5, ge=1, le=100)


class GenerationRef(Contract):
    name: str
    previous: str = Field(description="The generation that was active when the rebuild began.")


class CopyChunksInput(Contract):
    name: str
    after: uuid.UUID | None = Field(default=None, description="Copy chunks with a greater id.")
    batch_size: int = Field(ge=8, le=10_000)


class CopyChunksOutput(Contract):
    copied: int
    last: uuid.UUID | None


class VerifyInput(Contract):
    name: str
    sample_queries: int = Field(ge=1, le=100)


class VerifyOutput(Contract):
    points_active: int
    points_new: int
    added: int = Field(description="Points the new generation lacked, embedded and added.")
    removed: int = Field(description="Points the active generation no longer has, removed.")
    sample_queries_answered: int


class GenerationNameInput(Contract):
    name: str


class RebuildProgress(Contract):
    stage: str
    chunks_copied: int


class RebuildReport(Contract):
    workflow_id: str
    previous: str
    active: str
    chunks_copied: int
    points: int
    verified: VerifyOutput
    dropped_previous: bool
