"""Rerank activities: a cross-encoder scores (query, passage) pairs."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ragkit import policies
from ragkit.rerank import Reranker
from schemas.answer import RerankInput, RerankOutput


class RerankActivities:
    def __init__(self, reranker: Reranker | None) -> None:
        self.reranker = reranker

    @activity.defn
    def rerank(self, request: RerankInput) -> RerankOutput:
        if self.reranker is None:
            raise ApplicationError(
                "this worker has no reranker (DURABLE_RAG_RERANKER_MODEL is empty)",
                type=policies.NOT_CONFIGURED,
                non_retryable=True,
            )
        return RerankOutput(scores=self.reranker.score(request.query, request.passages))
