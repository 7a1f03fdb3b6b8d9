"""Opens the index the settings name (or one generation of it)."""

from __future__ import annotations

import shutil

from ragkit.index.base import VectorIndex
from ragkit.index.bm25 import Bm25Config, Bm25Encoder
from ragkit.settings import Settings


def bm25_encoder(settings: Settings) -> Bm25Encoder:
    """The one BM25 tokenizer and weighting of this deployment: the same for points and
    queries, whichever process encodes them."""
    return Bm25Encoder(
        Bm25Config(
            avg_len=settings.index.bm25_avg_len, k=settings.index.bm25_k, b=settings.index.bm25_b
        )
    )


def open_index(
    settings: Settings,
    dimension: int,
    name: str | None = None,
    hnsw_m: int | None = None,
    hnsw_ef_construct: int | None = None,
) -> VectorIndex:
    """`name`: a generation's physical name (default: the collection itself, generation one);
    the HNSW parameters apply when it is created."""
    name = name or settings.index.collection
    m = hnsw_m or settings.index.hnsw_m
    ef_construct = hnsw_ef_construct or settings.index.hnsw_ef_construct
    if settings.index.backend == "edge":
        from ragkit.index.edge import EdgeIndex

        return EdgeIndex(
            settings.index_path / name,
            dimension,
            m,
            ef_construct,
            settings.index.hnsw_ef_search,
            optimize_after=settings.index.optimize_after_points,
            segments=settings.index.edge_segments,
            open_wait=settings.index.edge_open_wait_seconds,
        )
    from qdrant_client import QdrantClient

    from ragkit.index.qdrant import QdrantServerIndex

    client = QdrantClient(
        url=settings.index.qdrant_url, timeout=int(settings.index.qdrant_timeout_seconds)
    )
    return QdrantServerIndex(
        client, name, dimension, m, ef_construct, settings.index.hnsw_ef_search
    )


def drop_index(settings: Settings, name: str) -> None:
    """Delete a generation's data for good (it must be closed)."""
    if settings.index.backend == "edge":
        shutil.rmtree(settings.index_path / name, ignore_errors=True)
        return
    from qdrant_client import QdrantClient

    client = QdrantClient(
        url=settings.index.qdrant_url, timeout=int(settings.index.qdrant_timeout_seconds)
    )
    try:
        client.delete_collection(name)
    finally:
        client.close()
