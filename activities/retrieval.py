"""Live retrieval activities: the query's vector search, run as a local activity in the
orchestrator that runs the answer, so a live question crosses no task queue before generation.

The orchestrator holds its own query embedder (a bulk embedding batch in the index worker never
holds it) and reads the index through `ragkit.index.reads`: directly (a Qdrant server), or through
the index worker's read socket (Qdrant Edge, which only its one opener may read).
"""

from __future__ import annotations

from temporalio import activity

from activities.errors import index_error
from ragkit.embedding import Embedder
from ragkit.index import IndexFilter
from ragkit.index.reads import IndexReader, search_query
from schemas.search import DenseSearchInput, VectorHit, VectorSearchOutput


class RetrievalActivities:
    def __init__(self, embedder: Embedder, reader: IndexReader) -> None:
        self.embedder = embedder
        self.reader = reader

    @activity.defn
    def search_vectors(self, request: DenseSearchInput) -> VectorSearchOutput:
        """Embed the query here and search the active index generation: no vector in history."""
        where = IndexFilter(tenant=request.tenant, document_ids=tuple(request.document_ids))
        try:
            hits, embed_seconds = search_query(
                self.embedder, self.reader, request.query, request.limit, where
            )
        except Exception as exc:
            raise index_error(exc) from exc
        return VectorSearchOutput(
            hits=[VectorHit(chunk_id=h.id, score=h.score) for h in hits],
            embed_seconds=embed_seconds,
        )
