"""Live retrieval activities: the query's vector search, run as a local activity in the
orchestrator that runs the answer, so a live question crosses no task queue before generation.

The orchestrator holds its own query embedder (a bulk embedding batch in the index worker never
holds it) and reads the index through `ragkit.index.reads`: directly (a Qdrant server), or through
the index worker's read socket (Qdrant Edge, which only its one opener may read).
"""

from __future__ import annotations

import time
from typing import Literal

from temporalio import activity

from activities.errors import index_error
from ragkit import failpoints, tracing
from ragkit.embedding import Embedder
from ragkit.index import IndexFilter, IndexHit
from ragkit.index.base import Fusion, NoKeywordVectorsError
from ragkit.index.bm25 import Bm25Encoder
from ragkit.index.reads import IndexReader, search_query
from ragkit.metrics import STEP_SECONDS
from schemas.search import DenseSearchInput, VectorHit, VectorSearchOutput


class RetrievalActivities:
    def __init__(
        self, embedder: Embedder, reader: IndexReader, bm25: Bm25Encoder | None = None
    ) -> None:
        self.embedder = embedder
        self.reader = reader
        self.bm25 = bm25 or Bm25Encoder()

    @activity.defn
    def search_vectors(self, request: DenseSearchInput) -> VectorSearchOutput:
        """Embed the query here and search the active index generation: no vector in history.
        With `keyword="bm25"`, BM25 in the index too (apart, or fused in one query). A generation
        from before BM25 answers dense hits only (`keyword="none"`): the workflow then ranks
        keywords in Postgres, as before."""
        with tracing.step(
            "retrieve", tracing.RETRIEVER, tracing.content(tracing.INPUT, request.query)
        ):
            output = self._search(request)
            tracing.annotate(
                {
                    **tracing.documents(tracing.RETRIEVED, hit_list(output.hits)),
                    "durable_rag.keyword": output.keyword,
                    "durable_rag.keyword_hits": len(output.keyword_hits),
                }
            )
            return output

    def _search(self, request: DenseSearchInput) -> VectorSearchOutput:
        where = IndexFilter.of(request.tenant, request.document_ids, request.filter)
        try:
            if request.keyword == "none":
                hits, embed_seconds = search_query(
                    self.embedder, self.reader, request.query, request.limit, where
                )
                return _output(hits, embed_seconds, top=_best(hits))
            return self._with_bm25(request, where)
        except Exception as exc:
            raise index_error(exc) from exc

    def _with_bm25(self, request: DenseSearchInput, where: IndexFilter) -> VectorSearchOutput:
        terms = self.bm25.query(request.query)
        vector: list[float] = []
        embed_seconds = 0.0
        if request.dense:
            began = time.perf_counter()
            vector = self.embedder.embed_query(request.query)
            embed_seconds = time.perf_counter() - began
            STEP_SECONDS.labels("embed_query").observe(embed_seconds)
        failpoints.hit("index")
        try:
            if not request.dense:
                keyword = self.reader.search_keyword(terms, request.limit, where)
                return _output([], 0.0, keyword_hits=keyword, keyword="bm25")
            if request.fusion == "none":
                keyword = self.reader.search_keyword(terms, request.limit, where)
                dense = self.reader.search(vector, request.limit, where)
                return _output(dense, embed_seconds, keyword_hits=keyword, keyword="bm25",
                               top=_best(dense))  # fmt: skip
            fusion = Fusion(request.fusion, request.rrf_k, request.weights)
            fused = self.reader.search_fused(
                vector, terms, request.limit, request.limit, where, fusion
            )
        except NoKeywordVectorsError:
            if not request.dense:
                raise
            # A generation from before BM25 (until a rebuild): dense here, keywords in Postgres.
            dense = self.reader.search(vector, request.limit, where)
            return _output(dense, embed_seconds, top=_best(dense))
        # Fused scores are not similarities: the router's confidence is the best dense match.
        probe = self.reader.search(vector, 1, where)
        return _output(fused, embed_seconds, keyword="fused", top=_best(probe))


def hit_list(hits: list[VectorHit]) -> list[tuple[str, float, str | None]]:
    """Hits as a span's documents: chunk id and score (no text: the index holds none)."""
    return [(str(h.chunk_id), h.score, None) for h in hits]


def _best(hits: list[IndexHit]) -> float | None:
    return max((h.score for h in hits), default=None)


def _output(
    hits: list[IndexHit],
    embed_seconds: float,
    keyword_hits: list[IndexHit] | None = None,
    keyword: Literal["none", "bm25", "fused"] = "none",
    top: float | None = None,
) -> VectorSearchOutput:
    return VectorSearchOutput(
        hits=[VectorHit(chunk_id=h.id, score=h.score) for h in hits],
        embed_seconds=embed_seconds,
        keyword_hits=[VectorHit(chunk_id=h.id, score=h.score) for h in keyword_hits or []],
        keyword=keyword,
        top_similarity=top,
    )
