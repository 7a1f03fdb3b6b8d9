"""In-process Qdrant Edge adapter (embedded profile): real HNSW, payload filters, a WAL on disk."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from ragkit.index.base import (
    PAYLOAD_INDEXES,
    Fusion,
    IndexConfigError,
    IndexFilter,
    IndexHit,
    IndexPoint,
    IndexUnavailableError,
    NoKeywordVectorsError,
)
from ragkit.index.bm25 import SPARSE_NAME, SparseVector

_SCHEMA = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
    "datetime": qe.PayloadSchemaType.Datetime,
}


class EdgeIndex:
    def __init__(
        self, path: Path, dimension: int, hnsw_m: int, hnsw_ef_construct: int, hnsw_ef_search: int
    ) -> None:
        self.path = path
        self.dimension = dimension
        self._ef_search = hnsw_ef_search
        self._lock = threading.Lock()
        self._closed = False
        hnsw = qe.HnswIndexConfig(
            m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=10_000
        )
        try:
            if path.is_dir() and any(path.iterdir()):
                self.keyword = _has_sparse(path)
                self._shard = qe.EdgeShard.load(str(path))
                existing = self._shard.info()  # noqa: F841  (proves it opened)
                stored = self._stored_dimension()
                if stored is not None and stored != dimension:
                    self._shard.close()
                    raise IndexConfigError(
                        f"vector index at {path} holds {stored}-dimensional vectors but the "
                        f"embedding model gives {dimension}: rebuild the index for the new model"
                    )
            else:
                path.mkdir(parents=True, exist_ok=True)
                config = qe.EdgeConfig(
                    vectors=qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine),
                    sparse_vectors={
                        SPARSE_NAME: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
                    },
                    hnsw_config=hnsw,
                )
                self.keyword = True
                self._shard = qe.EdgeShard.create(str(path), config)
                for name, kind in PAYLOAD_INDEXES.items():
                    self._shard.update(qe.UpdateOperation.create_field_index(name, _SCHEMA[kind]))
                self._shard.flush()
        except IndexConfigError:
            raise
        except Exception as exc:
            if "WouldBlock" in str(exc):
                raise IndexUnavailableError(
                    f"vector index at {path} is open in another process (only one opener is allowed)"
                ) from exc
            raise IndexUnavailableError(f"cannot open vector index at {path}: {exc}") from exc

    def _stored_dimension(self) -> int | None:
        records, _ = self._shard.scroll(qe.ScrollRequest(limit=1, with_vector=True))
        if not records:
            return None
        vector: Any = records[0].vector
        if isinstance(vector, dict):
            vector = vector.get("", next(iter(vector.values())))
        return len(vector)

    def _check(self, vector: Sequence[float]) -> None:
        if len(vector) != self.dimension:
            raise IndexConfigError(
                f"vector has {len(vector)} dimensions, index has {self.dimension}"
            )

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        for p in points:
            self._check(p.vector)
        ops = [qe.Point(str(p.id), self._vectors(p), p.payload) for p in points]
        with self._lock:
            self._shard.update(qe.UpdateOperation.upsert_points(ops))
            self._shard.flush()

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if not ids:
            return
        with self._lock:
            self._shard.update(qe.UpdateOperation.delete_points([str(i) for i in ids]))
            self._shard.flush()

    def delete_other_versions(self, tenant: str, document_id: uuid.UUID, keep_version: int) -> None:
        where = qe.Filter(
            must=[
                qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant)),
                qe.FieldCondition(key="document_id", match=qe.MatchValue(str(document_id))),
            ],
            must_not=[qe.FieldCondition(key="version", match=qe.MatchValue(keep_version))],
        )
        with self._lock:
            self._shard.update(qe.UpdateOperation.delete_points_by_filter(where))
            self._shard.flush()

    def delete_tenant(self, tenant: str) -> None:
        where = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant))])
        with self._lock:
            self._shard.update(qe.UpdateOperation.delete_points_by_filter(where))
            self._shard.flush()

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]:
        self._check(vector)
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(vector)),
            filter=self._filter(where),
            with_payload=True,
            params=qe.SearchParams(hnsw_ef=max(self._ef_search, limit)),
        )
        with self._lock:
            points = self._shard.query(request)
        return [
            IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points
        ]

    def _vectors(self, point: IndexPoint) -> Any:
        if not self.keyword:
            return list(point.vector)
        vectors: dict[str, Any] = {"": list(point.vector)}
        if point.sparse is not None:
            vectors[SPARSE_NAME] = qe.SparseVector(
                list(point.sparse.indices), list(point.sparse.values)
            )
        return vectors

    def _require_keyword(self) -> None:
        if not self.keyword:
            raise NoKeywordVectorsError(
                "this index generation holds no BM25 vectors (created before them): "
                "`durable-rag rebuild` builds one that does"
            )

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        self._require_keyword()
        if not query.indices:  # no term survived (stopwords only): nothing matches
            return []
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(_edge_sparse(query), using=SPARSE_NAME),
            filter=self._filter(where),
            with_payload=True,
        )
        with self._lock:
            points = self._shard.query(request)
        return [
            IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points
        ]

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        self._check(vector)
        self._require_keyword()
        where_filter = self._filter(where)
        prefetches = [
            qe.Prefetch(
                limit=candidates,
                query=qe.Query.Nearest(list(vector)),
                filter=where_filter,
                params=qe.SearchParams(hnsw_ef=max(self._ef_search, candidates)),
            )
        ]
        if query.indices:
            prefetches.append(
                qe.Prefetch(
                    limit=candidates,
                    query=qe.Query.Nearest(_edge_sparse(query), using=SPARSE_NAME),
                    filter=where_filter,
                )
            )
        weights = list(fusion.weights) if fusion.weights and len(prefetches) == 2 else None
        method: Any = (
            qe.Fusion.Rrf(fusion.k, weights=weights) if fusion.method == "rrf" else qe.Fusion.Dbsf()
        )
        request = qe.QueryRequest(
            limit=limit, prefetches=prefetches, query=method, filter=where_filter, with_payload=True
        )
        with self._lock:
            points = self._shard.query(request)
        return [
            IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points
        ]

    @staticmethod
    def _filter(where: IndexFilter) -> qe.Filter:
        must: list[Any] = [qe.FieldCondition(key="tenant", match=qe.MatchValue(where.tenant))]
        if where.document_ids:
            must.append(
                qe.FieldCondition(
                    key="document_id", match=qe.MatchAny([str(d) for d in where.document_ids])
                )
            )
        for key, lower, upper in where.ranges():
            must.append(qe.FieldCondition(key=key, range=qe.RangeDateTime(gte=lower, lte=upper)))
        for name, value in sorted(where.metadata.items()):
            must.append(qe.FieldCondition(key=f"meta.{name}", match=qe.MatchValue(value)))
        return qe.Filter(must=must)

    def count(self, tenant: str | None = None) -> int:
        where = None
        if tenant is not None:
            where = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant))])
        with self._lock:
            return int(self._shard.count(qe.CountRequest(exact=True, filter=where)))

    def point_ids(self, tenant: str | None = None) -> list[uuid.UUID]:
        where = None
        if tenant is not None:
            where = qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant))])
        ids: list[uuid.UUID] = []
        offset = None
        with self._lock:
            while True:
                records, offset = self._shard.scroll(
                    qe.ScrollRequest(offset=offset, limit=1_000, filter=where, with_payload=False)
                )
                ids.extend(uuid.UUID(str(r.id)) for r in records)
                if offset is None:
                    return ids

    def optimize(self) -> None:
        with self._lock:
            self._shard.optimize()

    def publish_alias(self, alias: str) -> None:
        pass  # in process, the pointer in Postgres is the only reader's alias

    def close(self) -> None:
        with self._lock:
            if not self._closed:  # a dropped generation is closed before its owner closes it
                self._shard.close()
                self._closed = True


def _edge_sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def _has_sparse(path: Path) -> bool:
    """Whether the shard at `path` was created with BM25 vectors (its config says)."""
    try:
        config = json.loads((path / "edge_config.json").read_text())
    except (OSError, ValueError):
        return False
    return SPARSE_NAME in (config.get("sparse_vectors") or {})
