"""The live retrieval activity with BM25 in the index (issue 18), on real Qdrant Edge shards and
the packaged MiniLM: what it asks of the index for each plan, and its fallback on a generation
from before BM25 (dense here, keywords left to Postgres)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import qdrant_edge as qe

from activities.retrieval import RetrievalActivities
from ragkit.embedding import Embedder
from ragkit.index import IndexPoint
from ragkit.index.bm25 import Bm25Encoder
from ragkit.index.edge import EdgeIndex
from ragkit.index.reads import ActiveReader
from schemas.search import DenseSearchInput

PASSAGES = {
    "falcon": "Peregrine falcons nest on high cliffs and dive faster than any other bird.",
    "heron": "Grey herons wade in shallow rivers and stab fish with their long bills.",
    "tide": "Tides rise and fall twice a day, pulled by the moon.",
}


class One:
    def __init__(self, index: EdgeIndex) -> None:
        self.index = index

    def serving(self) -> EdgeIndex:
        return self.index


def indexed(path: Path, embedder: Embedder, keyword: bool) -> EdgeIndex:
    if not keyword:  # a shard made before BM25: no sparse vectors in its config
        path.mkdir(parents=True)
        qe.EdgeShard.create(
            str(path),
            qe.EdgeConfig(
                vectors=qe.EdgeVectorParams(size=embedder.dimension, distance=qe.Distance.Cosine)
            ),
        ).close()
    index = EdgeIndex(path, embedder.dimension, 16, 100, 64)
    texts = list(PASSAGES.values())
    index.upsert(
        [
            IndexPoint(
                uuid.uuid5(uuid.NAMESPACE_OID, name),
                vector,
                {"tenant": "t", "name": name},
                sparse=sparse,
            )
            for name, vector, sparse in zip(
                PASSAGES,
                embedder.embed_passages(texts),
                Bm25Encoder().documents(texts),
                strict=True,
            )
        ]
    )
    return index


def names(hits: list) -> list[str]:  # type: ignore[type-arg]
    by_id = {uuid.uuid5(uuid.NAMESPACE_OID, n): n for n in PASSAGES}
    return [by_id[h.chunk_id] for h in hits]


@pytest.mark.parametrize("fusion", ["none", "rrf", "dbsf"])
def test_bm25_in_the_index_apart_or_fused(tmp_path: Path, embedder: Embedder, fusion: str) -> None:
    index = indexed(tmp_path / "shard", embedder, keyword=True)
    try:
        activities = RetrievalActivities(embedder, ActiveReader(One(index)), Bm25Encoder())
        found = activities.search_vectors(
            DenseSearchInput(
                tenant="t",
                query="Where do falcons nest?",
                limit=3,
                keyword="bm25",
                fusion=fusion,  # type: ignore[arg-type]
            )
        )
        assert found.embed_seconds > 0 and found.top_similarity is not None
        assert 0 < found.top_similarity <= 1  # a cosine, whatever the fused scores are
        if fusion == "none":
            assert found.keyword == "bm25"
            assert names(found.keyword_hits) == ["falcon"]  # only it shares a term
            assert names(found.hits)[0] == "falcon" and len(found.hits) == 3
        else:
            assert found.keyword == "fused" and found.keyword_hits == []
            assert names(found.hits)[0] == "falcon"
        alone = activities.search_vectors(
            DenseSearchInput(
                tenant="t", query="herons rivers", limit=3, dense=False, keyword="bm25"
            )
        )
        assert (alone.keyword, alone.embed_seconds, alone.hits) == ("bm25", 0.0, [])
        assert names(alone.keyword_hits) == ["heron"]
    finally:
        index.close()


def test_a_generation_from_before_bm25_answers_dense_and_leaves_keywords_to_postgres(
    tmp_path: Path, embedder: Embedder
) -> None:
    index = indexed(tmp_path / "old", embedder, keyword=False)
    try:
        activities = RetrievalActivities(embedder, ActiveReader(One(index)), Bm25Encoder())
        for fusion in ("none", "rrf"):
            found = activities.search_vectors(
                DenseSearchInput(
                    tenant="t",
                    query="Where do falcons nest?",
                    limit=3,
                    keyword="bm25",
                    fusion=fusion,  # type: ignore[arg-type]
                )
            )
            assert found.keyword == "none" and names(found.hits)[0] == "falcon"
        # BM25 alone cannot be served there: a permanent, typed failure (Postgres takes over).
        from temporalio.exceptions import ApplicationError

        with pytest.raises(ApplicationError) as failure:
            activities.search_vectors(
                DenseSearchInput(tenant="t", query="falcons", limit=3, dense=False, keyword="bm25")
            )
        assert failure.value.non_retryable and failure.value.type == "IndexConfigError"
    finally:
        index.close()
