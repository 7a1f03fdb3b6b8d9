"""The plain side of bench/serving.py's rows 1 and 2: an answer's same calls in an async function,
no Temporal (rules rewrite, vector || keyword search, fuse, hydrate, assemble, generate,
citations, store, cost)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from activities.answer_cache import AnswerCacheActivities
from activities.costs import CostActivities
from activities.documents import DocumentActivities
from activities.retrieval import RetrievalActivities
from bench.probes import TimedEngine
from durable_rag.client import RagClient
from ragkit.llm.engine import Messages
from ragkit.retrieval import (
    BUILTIN_USER_TEMPLATE,
    SYSTEM_PROMPT,
    Scored,
    assemble_context,
    build_prompt,
    estimate_tokens,
    parse_citations,
)
from schemas.answer import (
    AnswerCost,
    AskRequest,
    ChatMessage,
    Citation,
    RecordCostInput,
    StepCost,
    StoreAnswerInput,
)
from schemas.search import (
    DenseSearchInput,
    HydrateInput,
    KeywordSearchInput,
    VectorHit,
    VectorSearchOutput,
)
from workflows.answer import rewrite
from workflows.retrieve import fuse_hits


@dataclass
class Plain:
    """The answer's calls made directly, on the activity classes the workers run."""

    rag: RagClient
    retrieval: RetrievalActivities
    documents: DocumentActivities
    cache: AnswerCacheActivities
    costs: CostActivities
    engine: TimedEngine
    steps: dict[str, list[float]] = field(default_factory=dict)  # ms per step, when recording
    recording: bool = False

    def lap(self, step: str, began: float) -> float:
        now = time.perf_counter()
        if self.recording:
            self.steps.setdefault(step, []).append((now - began) * 1000)
        return now

    async def messages(
        self, request: AskRequest
    ) -> tuple[Messages, list[tuple[str, str]], dict[str, Any]]:
        """Retrieval to prompt, as AnswerWorkflow does it (workflows/answer.py, retrieve.py)."""
        plan = self.rag.answer_plan(request.max_answer_tokens, request.top_k)
        query = rewrite(request.question)
        limit = plan.retrieval.candidates
        began = time.perf_counter()
        retrieval = plan.retrieval
        if retrieval.keyword == "bm25":  # one index call, as retrieve.py's _in_index
            fusion = retrieval.fusion_method if retrieval.fusion_method != "zscore" else "none"
            found = await asyncio.to_thread(
                self.retrieval.search_vectors,
                DenseSearchInput(
                    tenant=request.tenant,
                    query=query,
                    limit=limit,
                    keyword="bm25",
                    fusion=fusion,
                    rrf_k=retrieval.rrf_k,
                    weights=(retrieval.dense_weight, retrieval.keyword_weight),
                ),
            )
            dense, dense_hits, keyword_hits = found, found.hits, found.keyword_hits
        else:
            dense, keyword = await asyncio.gather(
                asyncio.to_thread(
                    self.retrieval.search_vectors,
                    DenseSearchInput(tenant=request.tenant, query=query, limit=limit),
                ),
                asyncio.to_thread(
                    self.documents.keyword_search,
                    KeywordSearchInput(tenant=request.tenant, query=query, limit=limit),
                ),
            )
            dense_hits, keyword_hits = dense.hits, keyword.hits
        fused = (
            [Scored(str(h.chunk_id), h.score) for h in dense_hits]
            if retrieval.keyword == "bm25" and retrieval.fusion_method != "zscore"
            else fuse_hits(retrieval, dense_hits, keyword_hits)
        )
        began = self.lap("retrieve", began)
        hydrated = await asyncio.to_thread(
            self.documents.hydrate_hits,
            HydrateInput(
                tenant=request.tenant,
                hits=[VectorHit(chunk_id=uuid.UUID(s.key), score=s.score) for s in fused],
                limit=min(request.top_k * 2, 100),
            ),
        )
        self.lap("hydrate", began)
        ranked = hydrated.passages[: request.top_k]
        kept, _ = assemble_context(
            [(str(p.chunk_id), p.text, float(len(ranked) - i)) for i, p in enumerate(ranked)],
            plan.context_tokens - estimate_tokens(request.question),
            estimate_tokens,
        )
        template = plan.prompt
        user = build_prompt(
            request.question, kept, "", template.user if template else BUILTIN_USER_TEMPLATE
        )
        messages = [
            {"role": "system", "content": template.system if template else SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ]
        by_id = {str(p.chunk_id): p for p in hydrated.passages}
        return messages, kept, {"by_id": by_id, "plan": plan, "dense": dense}

    async def answer(self, request: AskRequest) -> None:
        """The whole answer: what `RagClient.ask` does, without the workflow."""
        trace_id = f"plain-{uuid.uuid4().hex}"
        messages, kept, found = await self.messages(request)
        began = time.perf_counter()
        generated = await self.engine.generate(messages, request.max_answer_tokens, trace_id)
        began = self.lap("generate", began)
        text = generated.text.strip()
        cited, _ = parse_citations(text, kept)
        by_id = found["by_id"]
        numbers = {key: n for n, (key, _) in enumerate(kept, start=1)}
        citations = [
            Citation(number=numbers[key], chunk_id=by_id[key].chunk_id, document_id=by_id[key].document_id,
                     source=by_id[key].source, title=by_id[key].title,
                     heading_path=by_id[key].heading_path, char_start=by_id[key].char_start,
                     char_end=by_id[key].char_end)
            for key in cited
        ]  # fmt: skip
        await asyncio.to_thread(
            self.cache.store_answer,
            StoreAnswerInput(tenant=request.tenant, question=request.question, trace_id=trace_id,
                             answer=text, citations=citations, model=generated.model),
        )  # fmt: skip
        began = self.lap("cache", began)
        dense: VectorSearchOutput = found["dense"]
        cost = AnswerCost(
            engine_seconds=generated.seconds,
            embed_seconds=dense.embed_seconds,
            steps=[StepCost(step="generate", model=generated.model, seconds=generated.seconds,
                            prompt_tokens=generated.prompt_tokens,
                            completion_tokens=generated.completion_tokens)],
        )  # fmt: skip
        keep = found["plan"].keep_transcript
        await asyncio.to_thread(
            self.costs.record_cost,
            RecordCostInput(trace_id=trace_id, tenant=request.tenant, model=generated.model,
                            route="primary", total_ms=0.0, cost=cost,
                            messages=[ChatMessage.model_validate(m) for m in messages]
                            if keep else [],
                            output=text if keep else "",
                            cited_chunks=[c.chunk_id for c in citations]),
        )  # fmt: skip
        self.lap("record_cost", began)

    async def first_token(self, request: AskRequest) -> tuple[float, str]:
        """Retrieve and stream from the engine: ms until the first text, and the engine's
        request id."""
        started = time.perf_counter()
        first: list[float] = []

        def seen(_: int, text: str) -> None:
            if text and not first:
                first.append(time.perf_counter())

        messages, _, _ = await self.messages(request)
        request_id = f"plain-{uuid.uuid4().hex}"
        await self.engine.generate(messages, request.max_answer_tokens, request_id, seen)
        return ((first[0] - started) * 1000 if first else float("nan")), request_id
