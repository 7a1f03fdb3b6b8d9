"""The vector index contract shared by both adapters."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from ragkit.index.bm25 import SparseVector
from schemas.common import DocumentFilter

# Payload keys written with every point. `document_id` and `version` let the index drop a
# document's superseded points by filter, without knowing their ids; the times are what a
# search's time range reads (RFC 3339 strings). `meta` (the document's metadata) is filtered
# on as `meta.<key>`, unindexed: its keys are the users'.
PAYLOAD_INDEXES = {
    "tenant": "keyword",
    "document_id": "keyword",
    "version": "integer",
    "created_at": "datetime",
    "updated_at": "datetime",
}


class IndexConfigError(RuntimeError):
    """The index on disk or on the server does not match the configuration (e.g. dimension)."""


class NoKeywordVectorsError(IndexConfigError):
    """The generation was created before BM25: it holds no keyword vectors (a rebuild adds
    them); keyword ranking stays with Postgres until then."""


class IndexUnavailableError(RuntimeError):
    """The index cannot be reached or opened right now; retrying may help."""


# What an opener of the embedded index logs while it waits for another process to let go (a
# deploy's new index worker, durable_rag/stack/fleet.py, stops the old one once it reads this).
WAITING_FOR_OPENER = "is open in another process: waiting for it to close"


@dataclass(frozen=True)
class IndexPoint:
    id: uuid.UUID
    vector: list[float]
    payload: dict[str, Any]
    # The text's BM25 vector (ragkit/index/bm25.py); an index without keyword vectors ignores it.
    sparse: SparseVector | None = None


@dataclass(frozen=True)
class Fusion:
    """How the index fuses its dense and BM25 candidates in one query: `rrf` (reciprocal rank,
    `k`, optional per-list `weights`: dense, then BM25) or `dbsf` (distribution-based score
    fusion: each list's scores normalised by their mean and 3 standard deviations, summed)."""

    method: Literal["rrf", "dbsf"] = "rrf"
    k: int = 60
    weights: tuple[float, float] | None = None


@dataclass(frozen=True)
class IndexHit:
    id: uuid.UUID
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class IndexFilter:
    """Every search is scoped to one tenant; the other fields only narrow it. Time bounds are
    inclusive, on the points' `created_at` (the document's first ingest) and `updated_at` (its
    version's staging time); `metadata` pairs must all match the points' `meta`."""

    tenant: str
    document_ids: Sequence[uuid.UUID] = field(default_factory=tuple)
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, tenant: str, document_ids: Sequence[uuid.UUID], documents: DocumentFilter
    ) -> IndexFilter:
        return cls(
            tenant=tenant,
            document_ids=tuple(document_ids),
            created_after=documents.created_after,
            created_before=documents.created_before,
            updated_after=documents.updated_after,
            updated_before=documents.updated_before,
            metadata=dict(documents.metadata),
        )

    def ranges(self) -> list[tuple[str, str | None, str | None]]:
        """(payload key, lower, upper) per bounded time, as RFC 3339 strings."""
        found = []
        for key in ("created_at", "updated_at"):
            kind = key.removesuffix("_at")
            after, before = getattr(self, f"{kind}_after"), getattr(self, f"{kind}_before")
            if after is not None or before is not None:
                found.append((key, after and after.isoformat(), before and before.isoformat()))
        return found

    def to_json(self) -> dict[str, Any]:
        """For the index worker's read socket (ragkit/index/reads.py)."""
        return {
            "tenant": self.tenant,
            "document_ids": [str(d) for d in self.document_ids],
            "filter": DocumentFilter(
                created_after=self.created_after,
                created_before=self.created_before,
                updated_after=self.updated_after,
                updated_before=self.updated_before,
                metadata=dict(self.metadata),
            ).model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IndexFilter:
        return cls.of(
            data["tenant"],
            [uuid.UUID(d) for d in data.get("document_ids", ())],
            DocumentFilter.model_validate(data.get("filter") or {}),
        )


class VectorIndex(Protocol):
    dimension: int
    # Whether it holds BM25 vectors: every index created from now on does; one created before
    # gets them through a rebuild (a new generation), and until then keyword ranking stays with
    # Postgres.
    keyword: bool

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or overwrite points by id; durable when it returns."""

    def delete(self, ids: Sequence[uuid.UUID]) -> None: ...

    def delete_other_versions(self, tenant: str, document_id: uuid.UUID, keep_version: int) -> None:
        """Drop the points of every version of a document except `keep_version`."""

    def delete_tenant(self, tenant: str) -> None:
        """Drop every point of a tenant (a tenant deleted whole)."""

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]: ...

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        """BM25: the points whose text shares the query's terms, by BM25 score (IDF applied by
        the index). Raises IndexConfigError on an index without keyword vectors."""

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        """Hybrid in one query: `candidates` dense and `candidates` BM25 hits, fused in the
        index (both under the same filter)."""

    def count(self, tenant: str | None = None) -> int: ...

    def point_ids(self, tenant: str | None = None) -> list[uuid.UUID]:
        """Every point id, in no order; for verification and rebuilds."""

    def optimize(self) -> None:
        """Reclaim the space of deleted points (compaction)."""

    def publish_alias(self, alias: str) -> None:
        """Make `alias` name this index (Qdrant server: a collection alias, switched atomically)."""

    def close(self) -> None: ...
