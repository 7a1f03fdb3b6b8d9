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
from dataclasses import dataclass
from typing import Any, Literal

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
        ConversationWindow,
        GenerateInput,
        GenerateOutput,
        ModelChoice,
        RecordCostInput,
        RecordShadowInput,
        RerankInput,
        RewriteInput,
        RewriteOutput,
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
    from workflows.retrieve import Retrieved, retrieve

# workflow.patched ids: the branch taken by runs started after the change.
RECORD_AT_ONCE = "record-at-once"

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


@dataclass
class Context:
    """The passages that went into the prompt, in prompt order (number n is kept[n - 1]), and
    every hydrated passage by chunk id."""

    kept: list[tuple[str, str]]  # (chunk id, text as placed in the prompt)
    by_id: dict[str, Passage]


@dataclass
class Reply:
    """What answers the question, and who: a model, the answer cache or the default reply."""

    text: str
    citations: list[Citation]
    method: str  # how the citations were found
    route: str
    model: str


@workflow.defn
class AnswerWorkflow:
    def __init__(self) -> None:
        # One run's record, kept by the steps: the Answer reports all of it.
        self.trace_id = ""
        self.timings: dict[str, float] = {}
        self.degradations: list[str] = []
        self.steps: list[StepCost] = []
        # Whose text this run carries: deleting one of these documents forgets the answer.
        self.read_documents: list[uuid.UUID] = []
        self._clock = 0.0

    @workflow.run
    async def run(self, wf_input: AnswerWorkflowInput) -> Answer:
        request, plan = wf_input.request, wf_input.plan
        self.trace_id = workflow.info().workflow_id
        self._clock = workflow.time()
        query = self._rules_query(request, plan)
        # Before the first activity: its start is confirmed while retrieval runs.
        shadow = self._start_shadow(wf_input) if plan.shadow is not None else None
        query = await self._llm_rewrite(request, plan, query)
        found = await self._retrieve(request, plan, query)
        passages = await self._hydrate(request, found)
        self.read_documents = sorted({p.document_id for p in passages}, key=str)
        passages, reranked = await self._rerank(plan, query, passages)
        context = self._assemble(request, plan, passages, wf_input.history)
        messages = self._messages(request, plan, context, wf_input.history)
        model, choice = self._route(request, plan, found)
        generated, route, model = await self._generate(
            messages, request, model, plan, wf_input.stream_id
        )
        self._lap("generate")
        reply = await self._reply(request, plan, context, generated, route, model)
        cost = self._cost(generated)
        await self._keep(request, plan, reply, cost, generated, messages)
        if not plan.shadow_of:  # a candidate's steps are not the service's
            record_steps(self.timings)
        await self._shadow_started(shadow)
        workflow.logger.info(
            "answered via %s with %d citation(s), %d degradation(s), in %.0f ms",
            reply.route,
            len(reply.citations),
            len(self.degradations),
            sum(self.timings.values()),
        )
        return self._answer(
            request, plan, query, found, reranked, context, reply, generated, cost, choice
        )

    def _spent(
        self, step: Literal["rewrite", "generate"], output: RewriteOutput | GenerateOutput
    ) -> None:
        """What a model's step cost, for the answer's cost (R26)."""
        self.steps.append(
            StepCost(
                step=step,
                model=output.model,
                seconds=output.seconds,
                prompt_tokens=output.prompt_tokens,
                completion_tokens=output.completion_tokens,
            )
        )

    def _lap(self, step: str) -> None:
        """The time since the previous step, as this step's latency."""
        now = workflow.time()
        self.timings[step] = round((now - self._clock) * 1000, 1)
        self._clock = now

    # --- the steps, in order --------------------------------------------------------------------

    def _rules_query(self, request: AskRequest, plan: AnswerPlan) -> str:
        """The rules' search query. A question that cannot fit the model's context even alone
        fails here, before any activity runs."""
        query = rewrite(request.question)
        question_tokens = estimate_tokens(request.question)
        if question_tokens > plan.context_tokens:
            raise ApplicationError(
                f"question of about {question_tokens} tokens is longer than the "
                f"{plan.context_tokens} tokens this model's context leaves for it",
                type=policies.PROMPT_TOO_LONG,
                non_retryable=True,
            )
        return query

    def _start_shadow(self, wf_input: AnswerWorkflowInput) -> asyncio.Future[Any]:
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
                "shadow_of": self.trace_id,
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
                id=ids.shadow_workflow_id(self.trace_id),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                memo={"tenant": wf_input.request.tenant},
                static_summary=f"shadow: {candidate.model} with {plan.shadow.prompt.id}",
            )
        )

    async def _llm_rewrite(self, request: AskRequest, plan: AnswerPlan, rules_query: str) -> str:
        """With a rewrite model, its search query; on any failure, the rules' one."""
        if plan.rewrite_model:
            rewritten = await best_effort(
                call(
                    InferenceActivities.rewrite_query,
                    RewriteInput(trace_id=self.trace_id, question=request.question),
                    summary=f"rewrite the question for search with {plan.rewrite_model}",
                    task_queue=policies.llm_queue(plan.rewrite_model),
                ),
                self.degradations,
                "rules_rewrite",
                "LLM query rewrite failed, rules used",
            )
            if rewritten is not None:
                self._spent("rewrite", rewritten)
                rules_query = rewritten.query
        self._lap("rewrite")
        return rules_query

    async def _retrieve(self, request: AskRequest, plan: AnswerPlan, query: str) -> Retrieved:
        found = await retrieve(
            request.tenant, query, plan.retrieval, request.document_ids, documents=request.filter
        )
        self.degradations.extend(found.degradations)
        if found.embed_seconds:
            self.steps.append(
                StepCost(step="embed_query", model="embedding", seconds=found.embed_seconds)
            )
        self._lap("retrieve")
        return found

    async def _hydrate(self, request: AskRequest, found: Retrieved) -> list[Passage]:
        """The fused hits' passages, of active versions only (Postgres decides what is live)."""
        passages: list[Passage] = []
        if found.fused:
            hydrated = await call(
                DocumentActivities.hydrate_hits,
                HydrateInput(
                    tenant=request.tenant,
                    hits=[VectorHit(chunk_id=uuid.UUID(s.key), score=s.score) for s in found.fused],
                    limit=min(request.top_k * 2, 100),
                ),
                summary=f"load the top {len(found.fused)} fused passages from Postgres",
            )
            passages = hydrated.passages
        self._lap("hydrate")
        return passages

    async def _rerank(
        self, plan: AnswerPlan, query: str, passages: list[Passage]
    ) -> tuple[list[Passage], bool]:
        """With a reranker, the top candidates in its order; on failure, the retrieval order."""
        if not plan.rerank or not passages:
            return passages, False
        candidates = passages[: plan.rerank_candidates]
        scored = await best_effort(
            call(
                RerankActivities.rerank,
                RerankInput(query=query, passages=[p.text for p in candidates]),
                summary=f"rerank the top {len(candidates)} passages",
            ),
            self.degradations,
            "rerank_skipped",
            "rerank failed, retrieval order kept",
        )
        self._lap("rerank")
        if scored is None:
            return passages, False
        order = sorted(
            range(len(candidates)),
            key=lambda i: (-scored.scores[i], str(candidates[i].chunk_id)),
        )
        reranked = [candidates[i].model_copy(update={"score": scored.scores[i]}) for i in order]
        return reranked + passages[len(candidates) :], True

    def _assemble(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        passages: list[Passage],
        history: ConversationWindow | None,
    ) -> Context:
        """The best passages that fit what the context leaves after the question and history,
        cut only at sentence ends."""
        history_tokens = (
            estimate_tokens(history.summary)
            + sum(estimate_tokens(t.content) for t in history.turns)
            if history
            else 0
        )
        budget = plan.context_tokens - estimate_tokens(request.question) - history_tokens
        # Rank, not raw score, decides what goes first: reranked and fused scores don't compare.
        ranked = passages[: request.top_k]
        kept, dropped = assemble_context(
            [(str(p.chunk_id), p.text, float(len(ranked) - i)) for i, p in enumerate(ranked)],
            budget,
            estimate_tokens,
        )
        if dropped:
            degrade(
                self.degradations,
                "passages_dropped",
                f"{dropped} passage(s) dropped to fit the context budget",
            )
        self._lap("assemble")
        return Context(kept=kept, by_id={str(p.chunk_id): p for p in passages})

    def _messages(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        context: Context,
        history: ConversationWindow | None,
    ) -> list[ChatMessage]:
        """The chat from the plan's prompt template: system, the history's turns, the question
        with its numbered passages."""
        template = plan.prompt
        prompt = build_prompt(
            request.question,
            context.kept,
            history.summary if history else "",
            template.user if template else BUILTIN_USER_TEMPLATE,
        )
        return [
            ChatMessage(role="system", content=template.system if template else SYSTEM_PROMPT),
            *(history.turns if history else []),
            ChatMessage(role="user", content=prompt),
        ]

    def _route(
        self, request: AskRequest, plan: AnswerPlan, found: Retrieved
    ) -> tuple[str, ModelChoice | None]:
        """The model to ask: the request's, else the router's choice, else the plan's."""
        model = request.model or plan.model
        if plan.routing is None:
            return model, None
        choice = (
            ModelChoice(model=model, rule="requested", reason="the request named its model")
            if request.model
            else choose_model(request.question, found.top_similarity, plan.routing)
        )
        return choice.model, choice

    async def _generate(
        self,
        messages: list[ChatMessage],
        request: AskRequest,
        model: str,
        plan: AnswerPlan,
        stream_id: str,
    ) -> tuple[GenerateOutput | None, str, str]:
        """(generation, route, model): the model's queue, then the fallback model's; (None,
        "default_reply", "") when neither answered."""
        fallback = plan.fallback_model
        routes = [("primary", model)]
        if fallback and fallback != model:
            routes.append(("fallback_model", fallback))
        for route, name in routes:
            try:
                generated = await call(
                    InferenceActivities.generate,
                    GenerateInput(
                        trace_id=self.trace_id,
                        messages=messages,
                        max_tokens=request.max_answer_tokens,
                        stream_id=stream_id,
                        sampling=request.sampling,
                    ),
                    summary=f"generate with {name}",
                    task_queue=policies.llm_queue(name),
                )
                return generated, route, name
            except ActivityError as err:
                if is_permanent(err) or is_cancellation(err):
                    raise
                degrade(
                    self.degradations,
                    "fallback_model" if route == "primary" and len(routes) > 1 else "no_model",
                    f"generation on {name} failed: {describe(err)}",
                )
        return None, "default_reply", ""

    async def _reply(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        context: Context,
        generated: GenerateOutput | None,
        route: str,
        model: str,
    ) -> Reply:
        """The generated text with its citations; when no model answered, the cached answer to
        the same question and corpus version, else the default reply with the top passages."""
        if generated is not None:
            text = generated.text.strip()
            cited, method = parse_citations(text, context.kept)
            reply = Reply(text, self._cite(context, cited), method, route, model)
        else:
            cached = await self._cached(request) if plan.cache_answers else None
            if cached is not None:
                # The cached run's citations, numbered as in that run's prompt.
                reply = Reply(
                    cached.answer, cached.citations, "cached", "cached_answer", cached.model
                )
                degrade(
                    self.degradations,
                    "cached_answer",
                    f"served the cached answer of run {cached.trace_id}",
                )
            else:
                degrade(self.degradations, "default_reply", "no model answered: the default reply")
                top = self._cite(context, [key for key, _ in context.kept[:3]])
                reply = Reply(DEGRADED_REPLY, top, "none", route, model)
        self._lap("parse")
        return reply

    def _cite(self, context: Context, keys: list[str]) -> list[Citation]:
        numbers = {key: n for n, (key, _) in enumerate(context.kept, start=1)}
        return [
            Citation(
                number=numbers[key],
                chunk_id=context.by_id[key].chunk_id,
                document_id=context.by_id[key].document_id,
                source=context.by_id[key].source,
                title=context.by_id[key].title,
                heading_path=context.by_id[key].heading_path,
                char_start=context.by_id[key].char_start,
                char_end=context.by_id[key].char_end,
                location=context.by_id[key].location,
            )
            for key in keys
        ]

    async def _cached(self, request: AskRequest) -> CachedAnswerOutput | None:
        found = await best_effort(
            call(
                AnswerCacheActivities.lookup_cached_answer,
                CacheKeyInput(
                    tenant=request.tenant,
                    question=request.question,
                    document_ids=request.document_ids,
                    filter=request.filter,
                ),
                summary="look for a cached answer to this question and corpus version",
            ),
            self.degradations,
            "cache_unavailable",
            "answer cache unavailable",
        )
        return found if found is not None and found.found else None

    async def _cache(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        reply: Reply,
        generated: GenerateOutput | None,
    ) -> None:
        """Keep a generated answer for the fallback path of a later LLM outage. Not one cut short
        or sampled at the caller's request: it would stand in for other callers' answers."""
        if generated is None or not plan.cache_answers or not reply.text:
            return
        if not request.sampling.is_default:
            return
        await best_effort(
            call(
                AnswerCacheActivities.store_answer,
                StoreAnswerInput(
                    tenant=request.tenant,
                    question=request.question,
                    document_ids=request.document_ids,
                    filter=request.filter,
                    trace_id=self.trace_id,
                    answer=reply.text,
                    citations=reply.citations,
                    model=reply.model,
                ),
                summary="keep the answer for the LLM fallback path",
            ),
            self.degradations,
            "answer_not_cached",
            "answer not cached",
        )
        self._lap("cache")

    async def _keep(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        reply: Reply,
        cost: AnswerCost,
        generated: GenerateOutput | None,
        messages: list[ChatMessage],
    ) -> None:
        """The answer cache entry and the cost row, written at once: neither reads the other,
        and the caller waits for both. Runs recorded before then wrote them one after the other."""
        if workflow.patched(RECORD_AT_ONCE):
            await asyncio.gather(
                self._cache(request, plan, reply, generated),
                self._record(request, plan, reply, cost, generated, messages),
            )
            return
        await self._cache(request, plan, reply, generated)
        await self._record(request, plan, reply, cost, generated, messages)

    def _cost(self, generated: GenerateOutput | None) -> AnswerCost:
        """Engine seconds and tokens per step (R26); the query's embedding apart."""
        if generated is not None:
            self._spent("generate", generated)
        steps = self.steps
        return AnswerCost(
            engine_seconds=round(sum(s.seconds for s in steps if s.step != "embed_query"), 4),
            embed_seconds=round(sum(s.seconds for s in steps if s.step == "embed_query"), 4),
            steps=steps,
        )

    async def _record(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        reply: Reply,
        cost: AnswerCost,
        generated: GenerateOutput | None,
        messages: list[ChatMessage],
    ) -> None:
        """A shadow run records its row beside the live answer's; a live answer its cost row
        (and transcript). Runs recorded before cost rows existed replay without this step."""
        cited = [c.chunk_id for c in reply.citations]
        total_ms = round(sum(self.timings.values()), 1)
        if plan.shadow_of:
            await best_effort(
                call(
                    CostActivities.record_shadow,
                    RecordShadowInput(
                        live_trace_id=plan.shadow_of,
                        trace_id=self.trace_id,
                        tenant=request.tenant,
                        model=reply.model or "-",
                        prompt_id=plan.prompt.id if plan.prompt else "builtin",
                        retrieval=plan.retrieval.mode,
                        answer=reply.text,
                        cited_chunks=cited,
                        total_ms=total_ms,
                        engine_seconds=cost.engine_seconds,
                        route=reply.route,
                    ),
                    summary="record the candidate's answer beside the live one",
                ),
                self.degradations,
                "shadow_not_recorded",
                "shadow answer not recorded",
            )
        elif workflow.patched("answer-cost-row"):
            transcript = generated is not None and plan.keep_transcript
            await best_effort(
                call(
                    CostActivities.record_cost,
                    RecordCostInput(
                        trace_id=self.trace_id,
                        tenant=request.tenant,
                        model=reply.model,
                        route=reply.route,
                        total_ms=total_ms,
                        cost=cost,
                        degraded=bool(self.degradations),
                        messages=messages if transcript else [],
                        output=reply.text if transcript else "",
                        cited_chunks=cited,
                        read_documents=self.read_documents,
                    ),
                    summary="record what this answer cost",
                ),
                self.degradations,
                "cost_not_recorded",
                "cost not recorded",
            )

    async def _shadow_started(self, shadow: asyncio.Future[Any] | None) -> None:
        if shadow is not None:
            try:
                await shadow  # started long ago: this does not wait
            except Exception as err:
                workflow.logger.warning("shadow run not started: %s", err)

    def _answer(
        self,
        request: AskRequest,
        plan: AnswerPlan,
        query: str,
        found: Retrieved,
        reranked: bool,
        context: Context,
        reply: Reply,
        generated: GenerateOutput | None,
        cost: AnswerCost,
        choice: ModelChoice | None,
    ) -> Answer:
        template = plan.prompt
        return Answer(
            trace_id=self.trace_id,
            question=request.question,
            query=query,
            answer=reply.text,
            citations=reply.citations,
            citation_method=reply.method,  # type: ignore[arg-type]
            model=reply.model,
            route=reply.route,  # type: ignore[arg-type]
            retrieval=found.retrieval,
            reranked=reranked,
            context=[
                ContextPassage(
                    number=n,
                    chunk_id=context.by_id[key].chunk_id,
                    score=context.by_id[key].score,
                    source=context.by_id[key].source,
                )
                for n, (key, _) in enumerate(context.kept, start=1)
            ],
            degradations=self.degradations,
            timings_ms=self.timings,
            tokens=TokenCounts(
                prompt=generated.prompt_tokens if generated else 0,
                completion=generated.completion_tokens if generated else 0,
            ),
            cost=cost,
            prompt_id=template.id if template else "builtin",
            prompt_hash=template.hash if template else "",
            model_choice=choice,
        )
