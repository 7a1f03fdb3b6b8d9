"""Opens the index the settings name."""

from __future__ import annotations

from durable_rag.index.base import VectorIndex
from durable_rag.settings import Settings


def open_index(settings: Settings, dimension: int) -> VectorIndex:
    if settings.vector_backend == "edge":
        from durable_rag.index.edge import EdgeIndex

        return EdgeIndex(
            settings.index_path / settings.qdrant_collection,
            dimension,
            settings.hnsw_m,
            settings.hnsw_ef_construct,
            settings.hnsw_ef_search,
        )
    from qdrant_client import QdrantClient

    from durable_rag.index.qdrant import QdrantServerIndex

    client = QdrantClient(url=settings.qdrant_url, timeout=int(settings.qdrant_timeout_seconds))
    return QdrantServerIndex(
        client,
        settings.qdrant_collection,
        dimension,
        settings.hnsw_m,
        settings.hnsw_ef_construct,
        settings.hnsw_ef_search,
    )
