"""Qdrant server adapter (production) through qdrant-client.

Tests run it against qdrant-client's local mode, which has the server's API (brute force, no payload
indexes). Client-side retries are off: Temporal owns retrying.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

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
    "keyword": qm.PayloadSchemaType.KEYWORD,
    "integer": qm.PayloadSchemaType.INTEGER,
    "datetime": qm.PayloadSchemaType.DATETIME,
}


class QdrantServerIndex:
    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        dimension: int,
        hnsw_m: int,
        hnsw_ef_construct: int,
        hnsw_ef_search: int,
    ) -> None:
        self.client = client
        self.collection = collection
        self.dimension = dimension
        self._ef_search = hnsw_ef_search
        try:
            if client.collection_exists(collection):
                info = client.get_collection(collection)
                self.keyword = SPARSE_NAME in (info.config.params.sparse_vectors or {})
                vectors = info.config.params.vectors
                size = vectors.size if isinstance(vectors, qm.VectorParams) else None
                if size != dimension:
                    raise IndexConfigError(
                        f"Qdrant collection {collection!r} holds {size}-dimensional vectors but the "
                        f"embedding model gives {dimension}: rebuild the index for the new model"
                    )
            else:
                client.create_collection(
                    collection,
                    vectors_config=qm.VectorParams(size=dimension, distance=qm.Distance.COSINE),
                    sparse_vectors_config={
                        SPARSE_NAME: qm.SparseVectorParams(modifier=qm.Modifier.IDF)
                    },
                    hnsw_config=qm.HnswConfigDiff(m=hnsw_m, ef_construct=hnsw_ef_construct),
                )
                self.keyword = True
                for name, kind in PAYLOAD_INDEXES.items():
                    client.create_payload_index(collection, name, field_schema=_SCHEMA[kind])
        except IndexConfigError:
            raise
        except (ResponseHandlingException, UnexpectedResponse, OSError) as exc:
            raise IndexUnavailableError(
                f"cannot reach Qdrant collection {collection!r}: {exc}"
            ) from exc

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        for p in points:
            if len(p.vector) != self.dimension:
                raise IndexConfigError(
                    f"vector has {len(p.vector)} dimensions, index has {self.dimension}"
                )
        self.client.upsert(
            self.collection,
            points=[
                qm.PointStruct(id=str(p.id), vector=self._vectors(p), payload=p.payload)
                for p in points
            ],
            wait=True,
        )

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            self.client.delete(
                self.collection,
                points_selector=qm.PointIdsList(points=[str(i) for i in ids]),
                wait=True,
            )

    def delete_other_versions(self, tenant: str, document_id: uuid.UUID, keep_version: int) -> None:
        where = qm.Filter(
            must=[
                qm.FieldCondition(key="tenant", match=qm.MatchValue(value=tenant)),
                qm.FieldCondition(key="document_id", match=qm.MatchValue(value=str(document_id))),
            ],
            must_not=[qm.FieldCondition(key="version", match=qm.MatchValue(value=keep_version))],
        )
        self.client.delete(
            self.collection, points_selector=qm.FilterSelector(filter=where), wait=True
        )

    def delete_tenant(self, tenant: str) -> None:
        where = qm.Filter(must=[qm.FieldCondition(key="tenant", match=qm.MatchValue(value=tenant))])
        self.client.delete(
            self.collection, points_selector=qm.FilterSelector(filter=where), wait=True
        )

    def search(self, vector: Sequence[float], limit: int, where: IndexFilter) -> list[IndexHit]:
        if len(vector) != self.dimension:
            raise IndexConfigError(
                f"vector has {len(vector)} dimensions, index has {self.dimension}"
            )
        response = self.client.query_points(
            self.collection,
            query=list(vector),
            query_filter=self._filter(where),
            limit=limit,
            with_payload=True,
            search_params=qm.SearchParams(hnsw_ef=max(self._ef_search, limit)),
        )
        return _hits(response.points)

    def _vectors(self, point: IndexPoint) -> Any:
        if not self.keyword:
            return list(point.vector)
        vectors: dict[str, Any] = {"": list(point.vector)}
        if point.sparse is not None:
            vectors[SPARSE_NAME] = _server_sparse(point.sparse)
        return vectors

    def _require_keyword(self) -> None:
        if not self.keyword:
            raise NoKeywordVectorsError(
                f"Qdrant collection {self.collection!r} holds no BM25 vectors (created before "
                "them): `durable-rag rebuild` builds one that does"
            )

    def search_keyword(self, query: SparseVector, limit: int, where: IndexFilter) -> list[IndexHit]:
        self._require_keyword()
        if not query.indices:
            return []
        response = self.client.query_points(
            self.collection,
            query=_server_sparse(query),
            using=SPARSE_NAME,
            query_filter=self._filter(where),
            limit=limit,
            with_payload=True,
        )
        return _hits(response.points)

    def search_fused(
        self,
        vector: Sequence[float],
        query: SparseVector,
        limit: int,
        candidates: int,
        where: IndexFilter,
        fusion: Fusion,
    ) -> list[IndexHit]:
        if len(vector) != self.dimension:
            raise IndexConfigError(
                f"vector has {len(vector)} dimensions, index has {self.dimension}"
            )
        self._require_keyword()
        where_filter = self._filter(where)
        prefetch = [
            qm.Prefetch(
                query=list(vector),
                filter=where_filter,
                limit=candidates,
                params=qm.SearchParams(hnsw_ef=max(self._ef_search, candidates)),
            )
        ]
        if query.indices:
            prefetch.append(
                qm.Prefetch(
                    query=_server_sparse(query),
                    using=SPARSE_NAME,
                    filter=where_filter,
                    limit=candidates,
                )
            )
        weights = list(fusion.weights) if fusion.weights and len(prefetch) == 2 else None
        method: Any = (
            qm.RrfQuery(rrf=qm.Rrf(k=fusion.k, weights=weights))
            if fusion.method == "rrf"
            else qm.FusionQuery(fusion=qm.Fusion.DBSF)
        )
        response = self.client.query_points(
            self.collection,
            prefetch=prefetch,
            query=method,
            query_filter=where_filter,
            limit=limit,
            with_payload=True,
        )
        return _hits(response.points)

    @staticmethod
    def _filter(where: IndexFilter) -> qm.Filter:
        must: list[Any] = [qm.FieldCondition(key="tenant", match=qm.MatchValue(value=where.tenant))]
        if where.document_ids:
            must.append(
                qm.FieldCondition(
                    key="document_id", match=qm.MatchAny(any=[str(d) for d in where.document_ids])
                )
            )
        for key, lower, upper in where.ranges():
            bounds = qm.DatetimeRange.model_validate({"gte": lower, "lte": upper})
            must.append(qm.FieldCondition(key=key, range=bounds))
        for name, value in sorted(where.metadata.items()):
            must.append(qm.FieldCondition(key=f"meta.{name}", match=qm.MatchValue(value=value)))
        return qm.Filter(must=must)

    @staticmethod
    def _tenant_filter(tenant: str | None) -> qm.Filter | None:
        if tenant is None:
            return None
        return qm.Filter(must=[qm.FieldCondition(key="tenant", match=qm.MatchValue(value=tenant))])

    def count(self, tenant: str | None = None) -> int:
        result = self.client.count(
            self.collection, count_filter=self._tenant_filter(tenant), exact=True
        )
        return int(result.count)

    def point_ids(self, tenant: str | None = None) -> list[uuid.UUID]:
        ids: list[uuid.UUID] = []
        offset = None
        while True:
            records, offset = self.client.scroll(
                self.collection,
                scroll_filter=self._tenant_filter(tenant),
                limit=1_000,
                offset=offset,
                with_payload=False,
                with_vectors=False,
            )
            ids.extend(uuid.UUID(str(r.id)) for r in records)
            if offset is None:
                return ids

    def optimize(self) -> None:
        pass  # the server's optimizer vacuums and merges segments by itself

    def publish_alias(self, alias: str) -> None:
        """Point `alias` at this collection, in one atomic request (for readers outside this
        project; our queries follow the pointer in Postgres)."""
        existing = {a.alias_name for a in self.client.get_aliases().aliases}
        operations: list[Any] = []
        if alias in existing:
            operations.append(
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias))
            )
        operations.append(
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=self.collection, alias_name=alias)
            )
        )
        self.client.update_collection_aliases(change_aliases_operations=operations)

    def close(self) -> None:
        self.client.close()


def _server_sparse(vector: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _hits(points: Sequence[Any]) -> list[IndexHit]:
    return [IndexHit(uuid.UUID(str(p.id)), float(p.score), dict(p.payload or {})) for p in points]
