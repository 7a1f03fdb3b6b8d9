"""Rerank activities: a cross-encoder scores (query, passage) pairs."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ragkit import policies, tracing
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
        with tracing.step(
            "rerank",
            tracing.RERANKER,
            tracing.reranker(self.reranker.name, len(request.passages), request.query),
        ) as span:
            scores = self.reranker.score(request.query, request.passages)
            if span is not None:
                # The passages as the workflow sent them, by position: the ids stay there.
                ranked = sorted(
                    ((str(i), score, text) for i, (score, text) in
                     enumerate(zip(scores, request.passages, strict=True))),
                    key=lambda doc: -doc[1],
                )  # fmt: skip
                span.set_attributes(tracing.documents(tracing.RERANKED, ranked))
            return RerankOutput(scores=scores)
