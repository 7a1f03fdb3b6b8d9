"""AnswerWorkflow: a question in, a cited answer out (R1, R8-R15, R23).

  rewrite (rules; optionally an LLM) -> dense search || keyword search -> fuse (workflows/retrieve.py)
  -> hydrate (active versions) -> rerank (optional)
  -> assemble the context within a token budget -> generate on llm-<model>
  -> parse citations -> keep the answer in the answer cache.

Fallbacks (declared in ragkit/policies.py):
- the LLM rewrite failing or not starting within 2 s: the rules' rewrite;
- either retriever failing: the other serves alone, reported in `degradations`;
- the model's queue failing or not starting in time: the fallback model's queue; then the cached
  answer to the same question and corpus version, if one was stored; then a default reply that
  says the service is degraded. `route` says which path answered.
Bad input (a question that cannot fit the model) fails at once with a typed, non-retryable error.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.answer_cache import AnswerCacheActivities
    from activities.costs import CostActivities
    from activities.documents import DocumentActivities
    from activities.inference import InferenceActivities
    from activities.rerank import RerankActivities
    from ragkit import ids, policies
    from ragkit.retrieval import (
        BUILTIN_USER_TEMPLATE,
        SYSTEM_PROMPT,
        assemble_context,
        build_prompt,
        estimate_tokens,
        parse_citations,
    )
    from ragkit.routing import choose_model
    from schemas.answer import (
        Answer,
        AnswerCost,
        AnswerPlan,
        AnswerWorkflowInput,
        AskRequest,
        CachedAnswerOutput,
        CacheKeyInput,
        ChatMessage,
        Citation,
        ContextPassage,
        GenerateInput,
        GenerateOutput,
        ModelChoice,
        RecordCostInput,
        RecordShadowInput,
        RerankInput,
        RewriteInput,
        StepCost,
        StoreAnswerInput,
        TokenCounts,
    )
    from schemas.search import HydrateInput, Passage, VectorHit
    from workflows.calls import (
        best_effort,
        call,
        degrade,
        describe,
        is_cancellation,
        is_permanent,
        record_steps,
    )
    from workflows.retrieve import retrieve

DEGRADED_REPLY = (
    "The answering service is degraded right now and could not generate an answer. "
    "The passages below are the most relevant ones found; please try again shortly."
)


def rewrite(question: str) -> str:
    """Cheap query rewrite: collapse whitespace, drop a leading conversational preamble."""
    text = " ".join(question.split())
    return re.sub(
        r"^(please\s+)?(can|could|would)\s+you\s+(tell me|explain)\s+", "", text, flags=re.I
    )


@workflow.defn
class AnswerWorkflow:
    @workflow.run
    async def run(self, wf_input: AnswerWorkflowInput) -> Answer:
        request, plan = wf_input.request, wf_input.plan
        trace_id = workflow.info().workflow_id
        timings: dict[str, float] = {}
        degradations: list[str] = []
        clock = workflow.time()

        def lap(step: str) -> None:
            nonlocal clock
            now = workflow.time()
            timings[step] = round((now - clock) * 1000, 1)
            clock = now

        query = rewrite(request.question)
        question_tokens = estimate_tokens(request.question)
        if question_tokens > plan.context_tokens:
            raise ApplicationError(
                f"question of about {question_tokens} tokens is longer than the "
                f"{plan.context_tokens} tokens this model's context leaves for it",
                type=policies.PROMPT_TOO_LONG,
                non_retryable=True,
            )
        # Before the first activity: its start is confirmed while retrieval runs.
        shadow = self._start_shadow(wf_input, trace_id) if plan.shadow is not None else None
        steps: list[StepCost] = []
        if plan.rewrite_model:
            query = await self._llm_rewrite(request, plan.rewrite_model, query, degradations, steps)
        lap("rewrite")

        found = await retrieve(request.tenant, query, plan.retrieval, request.document_ids)
        degradations.extend(found.degradations)
        fused = found.fused
        if found.embed_seconds:
            steps.append(
                StepCost(step="embed_query", model="embedding", seconds=found.embed_seconds)
            )
        lap("retrieve")
        passages: list[Passage] = []
        if fused:
            hydrated = await call(
                DocumentActivities.hydrate_hits,
                HydrateInput(
                    tenant=request.tenant,
                    hits=[VectorHit(chunk_id=uuid.UUID(s.key), score=s.score) for s in fused],
                    limit=min(request.top_k * 2, 100),
                ),
                summary=f"load the top {len(fused)} fused passages from Postgres",
            )
            passages = hydrated.passages
        lap("hydrate")

        reranked = False
        if plan.rerank and passages:
            candidates = passages[: plan.rerank_candidates]
            scored = await best_effort(
                call(
                    RerankActivities.rerank,
                    RerankInput(query=query, passages=[p.text for p in candidates]),
                    summary=f"rerank the top {len(candidates)} passages",
                ),
                degradations,
                "rerank_skipped",
                "rerank failed, retrieval order kept",
            )
            if scored is not None:
                order = sorted(
                    range(len(candidates)),
                    key=lambda i: (-scored.scores[i], str(candidates[i].chunk_id)),
                )
                passages = [
                    candidates[i].model_copy(update={"score": scored.scores[i]}) for i in order
                ] + passages[len(candidates) :]
                reranked = True
            lap("rerank")

        history = wf_input.history
        history_tokens = (
            estimate_tokens(history.summary)
            + sum(estimate_tokens(t.content) for t in history.turns)
            if history
            else 0
        )
        prompt_budget = plan.context_tokens - question_tokens - history_tokens
        # Rank, not raw score, decides what goes first: reranked and fused scores don't compare.
        ranked = passages[: request.top_k]
        kept, dropped = assemble_context(
            [(str(p.chunk_id), p.text, float(len(ranked) - i)) for i, p in enumerate(ranked)],
            prompt_budget,
            estimate_tokens,
        )
        if dropped:
            degrade(
                degradations,
                "passages_dropped",
                f"{dropped} passage(s) dropped to fit the context budget",
            )
        by_id = {str(p.chunk_id): p for p in passages}
        lap("assemble")

        template = plan.prompt
        prompt = build_prompt(
            request.question,
            kept,
            history.summary if history else "",
            template.user if template else BUILTIN_USER_TEMPLATE,
        )
        messages = [
            ChatMessage(role="system", content=template.system if template else SYSTEM_PROMPT),
            *(history.turns if history else []),
            ChatMessage(role="user", content=prompt),
        ]
        model = request.model or plan.model
        choice: ModelChoice | None = None
        if plan.routing is not None:
            choice = (
                ModelChoice(model=model, rule="requested", reason="the request named its model")
                if request.model
                else choose_model(request.question, found.top_similarity, plan.routing)
            )
            model = choice.model
        generated, route, model = await self._generate(
            trace_id,
            messages,
            request.max_answer_tokens,
            model,
            plan,
            degradations,
            wf_input.stream_id,
        )
        lap("generate")

        numbers = {key: n for n, (key, _) in enumerate(kept, start=1)}

        def cite(keys: list[str]) -> list[Citation]:
            return [
                Citation(
                    number=numbers[key],
                    chunk_id=by_id[key].chunk_id,
                    document_id=by_id[key].document_id,
                    source=by_id[key].source,
                    title=by_id[key].title,
                    heading_path=by_id[key].heading_path,
                    char_start=by_id[key].char_start,
                    char_end=by_id[key].char_end,
                )
                for key in keys
            ]

        text: str
        method: str
        if generated is not None:
            text = generated.text.strip()
            cited_keys, method = parse_citations(text, kept)
            citations = cite(cited_keys)
        else:
            cached = await self._cached(request, degradations) if plan.cache_answers else None
            if cached is not None:
                # The cached run's citations, numbered as in that run's prompt.
                route, model, text, citations, method = (
                    "cached_answer", cached.model, cached.answer, cached.citations, "cached"
                )  # fmt: skip
                degrade(
                    degradations,
                    "cached_answer",
                    f"served the cached answer of run {cached.trace_id}",
                )
            else:
                degrade(degradations, "default_reply", "no model answered: the default reply")
                text, method = DEGRADED_REPLY, "none"
                citations = cite([key for key, _ in kept[:3]])
        lap("parse")
        if generated is not None and plan.cache_answers and text:
            await self._store(request, trace_id, text, citations, model, degradations)
            lap("cache")
        if generated is not None:
            steps.append(
                StepCost(
                    step="generate",
                    model=generated.model,
                    seconds=generated.seconds,
                    prompt_tokens=generated.prompt_tokens,
                    completion_tokens=generated.completion_tokens,
                )
            )
        cost = AnswerCost(
            engine_seconds=round(sum(s.seconds for s in steps if s.step != "embed_query"), 4),
            embed_seconds=round(sum(s.seconds for s in steps if s.step == "embed_query"), 4),
            steps=steps,
        )
        if plan.shadow_of:
            await best_effort(
                call(
                    CostActivities.record_shadow,
                    RecordShadowInput(
                        live_trace_id=plan.shadow_of,
                        trace_id=trace_id,
                        tenant=request.tenant,
                        model=model or "-",
                        prompt_id=template.id if template else "builtin",
                        retrieval=plan.retrieval.mode,
                        answer=text,
                        cited_chunks=[c.chunk_id for c in citations],
                        total_ms=round(sum(timings.values()), 1),
                        engine_seconds=cost.engine_seconds,
                        route=route,
                    ),
                    summary="record the candidate's answer beside the live one",
                ),
                degradations,
                "shadow_not_recorded",
                "shadow answer not recorded",
            )
        # Runs recorded before cost rows existed replay without this step.
        elif workflow.patched("answer-cost-row"):
            kept_transcript = generated is not None and plan.keep_transcript
            await self._record_cost(
                request,
                trace_id,
                model,
                route,
                timings,
                cost,
                degradations,
                messages if kept_transcript else [],
                text if kept_transcript else "",
                [c.chunk_id for c in citations],
            )
        if not plan.shadow_of:  # a candidate's steps are not the service's
            record_steps(timings)
        if shadow is not None:
            try:
                await shadow  # started long ago: this does not wait
            except Exception as err:
                workflow.logger.warning("shadow run not started: %s", err)
        workflow.logger.info(
            "answered via %s with %d citation(s), %d degradation(s), in %.0f ms",
            route,
            len(citations),
            len(degradations),
            sum(timings.values()),
        )
        return Answer(
            trace_id=trace_id,
            question=request.question,
            query=query,
            answer=text,
            citations=citations,
            citation_method=method,  # type: ignore[arg-type]
            model=model,
            route=route,  # type: ignore[arg-type]
            retrieval=found.retrieval,
            reranked=reranked,
            context=[
                ContextPassage(
                    number=n,
                    chunk_id=by_id[key].chunk_id,
                    score=by_id[key].score,
                    source=by_id[key].source,
                )
                for n, (key, _) in enumerate(kept, start=1)
            ],
            degradations=degradations,
            timings_ms=timings,
            tokens=TokenCounts(
                prompt=generated.prompt_tokens if generated else 0,
                completion=generated.completion_tokens if generated else 0,
            ),
            cost=cost,
            prompt_id=template.id if template else "builtin",
            prompt_hash=template.hash if template else "",
            model_choice=choice,
        )

    def _start_shadow(self, wf_input: AnswerWorkflowInput, trace_id: str) -> asyncio.Future[Any]:
        """Start the candidate configuration on the same request, as a child abandoned when this
        run closes: it runs beside this answer and never delays or changes it (R28)."""
        plan = wf_input.plan
        assert plan.shadow is not None
        candidate = plan.model_copy(
            update={
                "model": plan.shadow.model,
                "prompt": plan.shadow.prompt,
                "retrieval": plan.shadow.retrieval or plan.retrieval,
                "shadow": None,
                "shadow_of": trace_id,
                "routing": None,
                "fallback_model": "",
                "cache_answers": False,
                "keep_transcript": False,
            }
        )
        return asyncio.ensure_future(
            workflow.start_child_workflow(
                AnswerWorkflow.run,
                wf_input.model_copy(update={"plan": candidate, "stream_id": ""}),
                id=ids.shadow_workflow_id(trace_id),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                memo={"tenant": wf_input.request.tenant},
                static_summary=f"shadow: {candidate.model} with {plan.shadow.prompt.id}",
            )
        )

    async def _llm_rewrite(
        self,
        request: AskRequest,
        model: str,
        rules_query: str,
        degradations: list[str],
        steps: list[StepCost],
    ) -> str:
        rewritten = await best_effort(
            call(
                InferenceActivities.rewrite_query,
                RewriteInput(trace_id=workflow.info().workflow_id, question=request.question),
                summary=f"rewrite the question for search with {model}",
                task_queue=policies.llm_queue(model),
            ),
            degradations,
            "rules_rewrite",
            "LLM query rewrite failed, rules used",
        )
        if rewritten is None:
            return rules_query
        steps.append(
            StepCost(
                step="rewrite",
                model=rewritten.model,
                seconds=rewritten.seconds,
                prompt_tokens=rewritten.prompt_tokens,
                completion_tokens=rewritten.completion_tokens,
            )
        )
        return rewritten.query

    async def _record_cost(
        self,
        request: AskRequest,
        trace_id: str,
        model: str,
        route: str,
        timings: dict[str, float],
        cost: AnswerCost,
        degradations: list[str],
        messages: list[ChatMessage],
        output: str,
        cited_chunks: list[uuid.UUID],
    ) -> None:
        await best_effort(
            call(
                CostActivities.record_cost,
                RecordCostInput(
                    trace_id=trace_id,
                    tenant=request.tenant,
                    model=model,
                    route=route,
                    total_ms=round(sum(timings.values()), 1),
                    cost=cost,
                    degraded=bool(degradations),
                    messages=messages,
                    output=output,
                    cited_chunks=cited_chunks,
                ),
                summary="record what this answer cost",
            ),
            degradations,
            "cost_not_recorded",
            "cost not recorded",
        )

    async def _store(
        self,
        request: AskRequest,
        trace_id: str,
        text: str,
        citations: list[Citation],
        model: str,
        degradations: list[str],
    ) -> None:
        await best_effort(
            call(
                AnswerCacheActivities.store_answer,
                StoreAnswerInput(
                    tenant=request.tenant,
                    question=request.question,
                    document_ids=request.document_ids,
                    trace_id=trace_id,
                    answer=text,
                    citations=citations,
                    model=model,
                ),
                summary="keep the answer for the LLM fallback path",
            ),
            degradations,
            "answer_not_cached",
            "answer not cached",
        )

    async def _cached(
        self, request: AskRequest, degradations: list[str]
    ) -> CachedAnswerOutput | None:
        found = await best_effort(
            call(
                AnswerCacheActivities.lookup_cached_answer,
                CacheKeyInput(
                    tenant=request.tenant,
                    question=request.question,
                    document_ids=request.document_ids,
                ),
                summary="look for a cached answer to this question and corpus version",
            ),
            degradations,
            "cache_unavailable",
            "answer cache unavailable",
        )
        return found if found is not None and found.found else None

    async def _generate(
        self,
        trace_id: str,
        messages: list[ChatMessage],
        max_tokens: int,
        model: str,
        plan: AnswerPlan,
        degradations: list[str],
        stream_id: str,
    ) -> tuple[GenerateOutput | None, str, str]:
        fallback = plan.fallback_model
        routes = [("primary", model)]
        if fallback and fallback != model:
            routes.append(("fallback_model", fallback))
        for route, name in routes:
            try:
                generated = await call(
                    InferenceActivities.generate,
                    GenerateInput(
                        trace_id=trace_id,
                        messages=messages,
                        max_tokens=max_tokens,
                        stream_id=stream_id,
                    ),
                    summary=f"generate with {name}",
                    task_queue=policies.llm_queue(name),
                )
                return generated, route, name
            except ActivityError as err:
                if is_permanent(err) or is_cancellation(err):
                    raise
                degrade(
                    degradations,
                    "fallback_model" if route == "primary" and len(routes) > 1 else "no_model",
                    f"generation on {name} failed: {describe(err)}",
                )
        return None, "default_reply", ""
