"""Embedding activities: the model alone, for queries. Chunk embedding happens inside
`VectorIndexActivities.index_documents`, so chunk vectors never pass through workflow history."""

from __future__ import annotations

from temporalio import activity

from durable_rag.embedding import Embedder
from schemas.search import EmbedQueryInput, EmbedQueryOutput


class EmbeddingActivities:
    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    @activity.defn
    def embed_query(self, request: EmbedQueryInput) -> EmbedQueryOutput:
        return EmbedQueryOutput(
            vector=self.embedder.embed_query(request.text), model=self.embedder.name
        )
