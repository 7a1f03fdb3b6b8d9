"""The vector index contract shared by both adapters."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Payload keys written with every point. `document_id` and `version` let the index drop a
# document's superseded points by filter, without knowing their ids.
PAYLOAD_INDEXES = {"tenant": "keyword", "document_id": "keyword", "version": "integer"}


class IndexConfigError(RuntimeError):
    """The index on disk or on the server does not match the configuration (e.g. dimension)."""


class IndexUnavailableError(RuntimeError):
    """The index cannot be reached or opened right now; retrying may help."""


@dataclass(frozen=True)
class IndexPoint:
    id: uuid.UUID
    vector: list[float]
    payload: dict[str, Any]


@dataclass(frozen=True)
class IndexHit:
    id: uuid.UUID
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class IndexFilter:
    """Every search is scoped to one tenant; the other fields only narrow it."""

    tenant: str
    document_ids: Sequence[uuid.UUID] = field(default_factory=tuple)


class VectorIndex(Protocol):
    dimension: int

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or overwrite points by id; durable when it returns."""

    def delete(self, ids: Sequence[uuid.UUID]) -> None: ...

    def delete_other_versions(self, tenant: str, document_id: uuid.UUID, keep_version: int) -> None:
        """Drop the points of every version of a document except `keep_version`."""

    def delete_tenant(self, tenant: str) -> None:
        """Drop every point of a tenant (a tenant deleted whole)."""

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]: ...

    def count(self, tenant: str | None = None) -> int: ...

    def point_ids(self, tenant: str | None = None) -> list[uuid.UUID]:
        """Every point id, in no order; for verification and rebuilds."""

    def optimize(self) -> None:
        """Reclaim the space of deleted points (compaction)."""

    def publish_alias(self, alias: str) -> None:
        """Make `alias` name this index (Qdrant server: a collection alias, switched atomically)."""

    def close(self) -> None: ...
