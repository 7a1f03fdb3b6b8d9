"""AnswerWorkflow end to end: real Temporal, Postgres, Qdrant Edge, MiniLM and vLLM (CPU) SmolLM2.

Acceptance checks 1-5 and 7 of the answer issue.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from bench.floor import FloorWorkflow, MinimalWorkflow, command_shape, floor_workers
from durable_rag.client import RagClient
from ragkit import policies, prompts
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine, VllmEngine
from ragkit.rerank import PACKAGED_RERANKER, load_reranker
from ragkit.settings import Settings
from ragkit.store import costs
from schemas.answer import Answer, AskRequest
from tests.conftest import Database, Stack, copy_documents, running_stack
from tests.engines import ScriptedEngine
from tests.workflows.test_ingest import save_history
from workers import llm as llm_worker
from workers.common import worker_interceptors

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCUMENTS = [
    "technology/unicode-and-utf-8.md",
    "history/great-fire-of-london.md",
    "science/photosynthesis.md",
    "technology/vector-search-and-hnsw.md",
    "history/lighthouses.md",
    "science/tides.txt",
]
QUESTION = "Who designed the UTF-8 encoding?"
EXPECTED = "unicode-and-utf-8.md"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_documents(DOCUMENTS, tmp_path_factory.mktemp("answer-corpus"))


@asynccontextmanager
async def answering(
    client: Client,
    database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    data_dir: Path,
    llm_queue_name: str | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[Stack, RagClient, str]]:
    """The stack plus an LLM worker on the session's engine, under a uuid model name."""
    model = llm_queue_name or f"smol-{uuid.uuid4().hex[:8]}"
    async with running_stack(client, database, embedder, data_dir, **overrides) as stack:
        worker = llm_worker.build_worker(
            client, stack.settings, llm_engine, task_queue=policies.llm_queue(model)
        )
        async with worker:
            settings = stack.settings.model_copy(update={"llm_served_name": model})
            yield stack, RagClient(client, settings), model


@pytest.fixture(scope="module")
async def ingested(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    corpus: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    data_dir = tmp_path_factory.mktemp("answer-data")
    async with running_stack(client, module_database, embedder, data_dir) as stack:
        rag = await stack.rag()
        result = await rag.ingest([str(corpus)], tenant="t")
        assert result.failures == [] and result.totals.documents_ingested == len(DOCUMENTS)
    return data_dir


async def ingest_sample(
    client: Client,
    database: Database,
    embedder: Embedder,
    tmp_path_factory: pytest.TempPathFactory,
    tenant: str = "t",
) -> Path:
    """DOCUMENTS ingested for a tenant into `database` and a fresh data folder; returns the
    folder (its index). The first call of the session ingests for real and keeps a copy of both;
    later calls get the copy (the database from a template, the folder copied): the same
    documents, chunks and points, without a stack and MiniLM each time."""
    data_dir = tmp_path_factory.mktemp("sample-data")
    if tenant in _SAMPLES:
        template, index = _SAMPLES[tenant]
        database.replace_with_copy_of(template)
        shutil.copytree(index, data_dir, dirs_exist_ok=True)
        return data_dir
    corpus = copy_documents(DOCUMENTS, tmp_path_factory.mktemp("sample-corpus"))
    async with running_stack(client, database, embedder, data_dir) as stack:
        result = await (await stack.rag()).ingest([str(corpus)], tenant=tenant)
        assert not result.failures
    template = f"t_sample_{tenant}_{uuid.uuid4().hex[:6]}"
    database.copy_to(template)
    index = tmp_path_factory.mktemp("sample-index")
    shutil.copytree(data_dir, index, dirs_exist_ok=True)
    _SAMPLES[tenant] = (template, index)
    return data_dir


# tenant -> (the database to copy, the data folder to copy): the session's ingested sample.
_SAMPLES: dict[str, tuple[str, Path]] = {}


def cited_files(answer: Answer) -> set[str]:
    return {Path(c.source).name for c in answer.citations}


async def test_answer_cites_the_document_it_comes_from(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    ingested: Path,
) -> None:
    async with answering(client, module_database, embedder, engine, ingested) as (
        _stack,
        rag,
        model,
    ):
        answer = await rag.ask(AskRequest(tenant="t", question=QUESTION, max_answer_tokens=64))
        await save_history(client, answer.trace_id, "answer")
    assert answer.route == "primary" and answer.model == model
    assert answer.retrieval == "hybrid" and answer.degradations == []
    assert answer.answer
    assert EXPECTED in cited_files(answer), answer
    assert answer.tokens.prompt > 0 and answer.tokens.completion > 0
    assert set(answer.timings_ms) >= {"retrieve", "hydrate", "assemble", "generate", "cache"}
    assert answer.trace_id.startswith("answer-")
    # The exact prompt version it was built from (R16).
    template = prompts.load("answer-v1")
    assert (answer.prompt_id, answer.prompt_hash) == ("answer-v1", template.hash)
    assert answer.model_choice is None  # no router configured
    # What it cost, per step, in the answer and in Postgres (R26).
    assert [s.step for s in answer.cost.steps] == ["embed_query", "generate"]
    assert answer.cost.engine_seconds > 0 and answer.cost.embed_seconds > 0
    row = module_database.rows(
        "SELECT engine_seconds, prompt_tokens, completion_tokens, model FROM answer_costs "
        "WHERE trace_id = %s",
        answer.trace_id,
    )
    assert row == [
        (
            pytest.approx(answer.cost.engine_seconds),
            answer.tokens.prompt,
            answer.tokens.completion,
            model,
        )
    ]


async def test_the_benchmarks_floor_issues_the_commands_an_answer_issues(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    """bench/serving.py reads row 1 against FloorWorkflow: it must ask Temporal for what an answer
    asks, in the same workflow tasks, or the floor measures another shape. MinimalWorkflow is the
    answer less every step that could be merged: retrieval, then generate."""
    async with answering(client, module_database, embedder, llm_engine, ingested) as (
        stack,
        rag,
        _,
    ):
        answer = await rag.ask(AskRequest(tenant="t", question=QUESTION, max_answer_tokens=4))
        events = (await client.get_workflow_handle(answer.trace_id).fetch_history()).events
        queues = (f"floor-{uuid.uuid4().hex[:8]}", f"floor-llm-{uuid.uuid4().hex[:8]}")
        shapes: dict[str, list[str]] = {}
        with ThreadPoolExecutor(2) as executor:
            workers = floor_workers(client, *queues, worker_interceptors(stack.settings), executor)
            async with workers[0], workers[1]:
                for flow in (FloorWorkflow, MinimalWorkflow):
                    handle = await client.start_workflow(
                        flow.run, queues[1], id=f"floor-{uuid.uuid4().hex}", task_queue=queues[0]
                    )
                    await handle.result()
                    shapes[flow.__name__] = command_shape((await handle.fetch_history()).events)
    assert answer.route == "primary" and answer.degradations == []
    asked = command_shape(events)
    assert asked == ["task", "local", "local", "remote:generate", "task", "local", "local"], asked
    assert shapes["FloorWorkflow"] == [
        "task", "local", "local", "remote:floor_generate", "task", "local", "local"
    ]  # fmt: skip
    assert shapes["MinimalWorkflow"] == ["task", "local", "remote:floor_generate", "task"]


async def test_the_router_sends_each_class_of_question_to_its_models_queue(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    """R27: two LLM workers (small and large queues, one engine behind both here); each class of
    question must reach the expected queue, and the answer says which rule decided."""
    small, large = f"small-{uuid.uuid4().hex[:6]}", f"large-{uuid.uuid4().hex[:6]}"
    cases = [
        (QUESTION, small, "simple"),
        ("Why did the Great Fire of London spread so fast?", large, "hard_question"),
        (
            "My grandmother keeps asking me about this and I promised to find out properly: "
            "which engineers actually designed the UTF-8 encoding, and in what year?",
            large,
            "long_question",
        ),
        ("Qwerty zxcvb plonk frobnicate?", large, "low_confidence"),
    ]
    async with answering(
        client,
        module_database,
        embedder,
        llm_engine,
        ingested,
        llm_queue_name=small,
        router_small_model=small,
        router_large_model=large,
        router_max_simple_words=16,
        router_min_confidence=0.3,
    ) as (stack, rag, _):
        large_worker = llm_worker.build_worker(
            client, stack.settings, llm_engine, task_queue=policies.llm_queue(large)
        )
        async with large_worker:
            answers = [
                await rag.ask(AskRequest(tenant="t", question=q, max_answer_tokens=8, top_k=2))
                for q, _, _ in cases
            ]
            requested = await rag.ask(
                AskRequest(tenant="t", question=QUESTION, max_answer_tokens=8, model=large)
            )
            await save_history(client, answers[1].trace_id, "answer-routed")
    for answer, (question, model, rule) in zip(answers, cases, strict=True):
        assert answer.model_choice is not None
        assert (answer.model, answer.model_choice.rule) == (model, rule), (
            question,
            answer.model_choice.reason,
        )
        assert answer.route == "primary" and answer.model_choice.reason
    assert requested.model == large and requested.model_choice is not None
    assert requested.model_choice.rule == "requested"


async def test_a_shadow_run_never_changes_the_answer_and_both_outputs_are_recorded(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    """R28: the same question with shadow off and on gets the same answer; the live answer
    returns while the candidate still waits for a worker (nothing waits on it); then the
    candidate runs and both outputs are recorded side by side."""
    candidate = f"cand-{uuid.uuid4().hex[:6]}"
    request = AskRequest(tenant="t", question=QUESTION, max_answer_tokens=12, top_k=2)
    async with answering(client, module_database, embedder, llm_engine, ingested) as (
        stack,
        rag,
        model,
    ):
        off = await rag.ask(request)
        shadowing = RagClient(
            client,
            rag.settings.model_copy(
                update={
                    "shadow_model": candidate,
                    "shadow_retrieval_mode": "keyword",
                    "shadow_sample_rate": 1.0,
                }
            ),
        )
        on = await shadowing.ask(request)
        shadow = client.get_workflow_handle(f"shadow-{on.trace_id}", result_type=Answer)
        assert (await shadow.describe()).status == WorkflowExecutionStatus.RUNNING
        candidate_worker = llm_worker.build_worker(
            client, stack.settings, llm_engine, task_queue=policies.llm_queue(candidate)
        )
        async with candidate_worker:
            shadowed = await shadow.result()
        await save_history(client, on.trace_id, "answer-shadowed")
        await save_history(client, shadow.id, "answer-shadow-run")
    assert (on.answer, on.route, on.degradations) == (off.answer, "primary", [])
    assert [c.chunk_id for c in on.citations] == [c.chunk_id for c in off.citations]
    assert on.model == model and shadowed.model == candidate and shadowed.route == "primary"
    assert module_database.rows(
        "SELECT model, answer, prompt_id, retrieval, route FROM shadow_runs "
        "WHERE live_trace_id = %s",
        on.trace_id,
    ) == [(candidate, shadowed.answer, "answer-v1", "keyword", "primary")]
    assert shadowed.retrieval == "keyword_only" and on.retrieval == "hybrid"
    # The live answer's record is the live one; the candidate wrote no cost row of its own.
    assert module_database.rows(
        "SELECT model FROM answer_costs WHERE trace_id = ANY(%s)", [on.trace_id, shadowed.trace_id]
    ) == [(model,)]
    assert (
        module_database.scalar(
            "SELECT count(*) FROM shadow_runs WHERE live_trace_id = %s", off.trace_id
        )
        == 0
    )
    with module_database.sessions() as session:
        (row,) = [
            r for r in costs.shadow_report(session, costs.since_days(1)) if candidate in r.candidate
        ]
    assert row.pairs == 1 and 0 <= row.answer_similarity <= 1 and row.candidate_p50_ms > 0


async def test_vector_index_down_keyword_search_answers(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    async with answering(
        client,
        module_database,
        embedder,
        llm_engine,
        ingested,
        with_index_worker=False,  # nobody serves the index's read socket: the vector path fails
        activity_policies={"search_vectors": {"schedule_to_close_seconds": 2}},
    ) as (_stack, rag, _model):
        # Two passages: a 135M model strays easily when given more.
        answer = await rag.ask(
            AskRequest(tenant="t", question=QUESTION, max_answer_tokens=32, top_k=2)
        )
    assert answer.retrieval == "keyword_only"
    assert any("vector search failed" in d for d in answer.degradations)
    assert EXPECTED in cited_files(answer), answer.model_dump_json(indent=1)


async def test_keyword_search_failing_vector_search_answers(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    module_database.execute("ALTER TABLE chunks RENAME COLUMN tsv TO tsv_broken")
    try:
        # Postgres ranks the keywords (BM25 in the index would not notice its failure).
        async with answering(
            client, module_database, embedder, llm_engine, ingested, retrieval_keyword="ts_rank"
        ) as (_, rag, _m):
            answer = await rag.ask(
                AskRequest(tenant="t", question=QUESTION, max_answer_tokens=32, top_k=2)
            )
    finally:
        module_database.execute("ALTER TABLE chunks RENAME COLUMN tsv_broken TO tsv")
    assert answer.retrieval == "vector_only"
    assert any("keyword search failed" in d for d in answer.degradations)
    assert EXPECTED in cited_files(answer), answer.model_dump_json(indent=1)


async def test_primary_llm_down_the_fallback_model_then_a_cached_answer_then_a_default_reply(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    async with answering(
        client,
        module_database,
        embedder,
        llm_engine,
        ingested,
        activity_policies={"generate": {"schedule_to_start_seconds": 2}},
    ) as (_stack, rag, model):
        # The primary model's queue has no worker; the fallback is the running one.
        rag.settings = rag.settings.model_copy(
            update={"llm_served_name": "nobody-serves-this", "llm_fallback_model": model}
        )
        started = time.monotonic()
        answer = await rag.ask(AskRequest(tenant="t", question=QUESTION, max_answer_tokens=32))
        assert time.monotonic() - started < 2 + 30  # the declared schedule-to-start, then an answer
        assert answer.route == "fallback_model" and answer.model == model
        assert any("nobody-serves-this" in d for d in answer.degradations)

        # No model answers now: the answer just generated for this question and corpus is served.
        rag.settings = rag.settings.model_copy(update={"llm_fallback_model": ""})
        again = await rag.ask(
            AskRequest(tenant="t", question=f"  {QUESTION.upper()} ", max_answer_tokens=32)
        )
        assert again.route == "cached_answer" and again.citation_method == "cached"
        assert (again.answer, again.citations, again.model) == (
            answer.answer,
            answer.citations,
            answer.model,
        )
        assert any(answer.trace_id in d for d in again.degradations)
        await save_history(client, again.trace_id, "answer-cached")

        # A question never answered before gets the default reply.
        unseen = await rag.ask(
            AskRequest(tenant="t", question="Where did the Great Fire of London begin?")
        )
        assert unseen.route == "default_reply"
        assert "degraded" in unseen.answer
        assert unseen.citations, "the default reply still points at the passages found"


@pytest.fixture(
    params=[
        "scripted",
        pytest.param("vllm", marks=[pytest.mark.e2e]),
    ]
)
def generating_engine(request: pytest.FixtureRequest) -> LLMEngine:
    """The real engine (cancellation must reach vLLM) and, in the integration tier, the scripted
    one generating as slowly as a busy CPU: a worker that stops aborting fails both."""
    if request.param == "vllm":
        engine: LLMEngine = request.getfixturevalue("engine")
        return engine
    return ScriptedEngine(lambda _: "An essay on text encodings. " * 60, seconds_per_token=0.05)


async def test_cancelling_an_answer_stops_generation_in_the_engine_within_a_second(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    generating_engine: LLMEngine,
    ingested: Path,
) -> None:
    engine = generating_engine
    async with answering(client, module_database, embedder, engine, ingested) as (_, rag, _m):
        handle = await rag.start_ask(
            AskRequest(
                tenant="t",
                question="Write a long, detailed essay about the history of text encodings.",
                max_answer_tokens=256,
            )
        )
        deadline = time.monotonic() + 120
        while engine.running_requests() == 0:
            assert time.monotonic() < deadline, "generation never started"
            await asyncio.sleep(0.02)
        await handle.cancel()
        cancelled_at = time.monotonic()
        while engine.running_requests() > 0:
            assert time.monotonic() - cancelled_at < 5, "the engine kept generating"
            await asyncio.sleep(0.01)
        stopped_after = time.monotonic() - cancelled_at
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert stopped_after < 1.0, f"generation stopped {stopped_after:.2f} s after the cancel"


async def test_the_optional_llm_rewrite_runs_on_the_model_queue_and_falls_back_to_rules(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    question = "Could you tell me who designed the UTF-8 encoding?"
    async with answering(client, module_database, embedder, llm_engine, ingested) as (
        _,
        rag,
        model,
    ):
        rag.settings = rag.settings.model_copy(update={"query_rewrite_model": model})
        request = AskRequest(tenant="t", question=question, max_answer_tokens=16, top_k=2)
        handle = await rag.start_ask(request)
        answer = await handle.result()
        history = await handle.fetch_history()
        assert not any("rewrite" in d for d in answer.degradations), answer.degradations
        assert answer.query and "\n" not in answer.query
        assert "rewrite_query" in [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        await save_history(client, answer.trace_id, "answer-llm-rewrite")

        # Nobody serves the rewrite model's queue: after its 2 s schedule-to-start, rules rewrite.
        rag.settings = rag.settings.model_copy(update={"query_rewrite_model": "nobody-rewrites"})
        answer = await rag.ask(request)
    assert any("LLM query rewrite failed" in d for d in answer.degradations), answer.degradations
    assert answer.query == "who designed the UTF-8 encoding?"
    assert answer.route == "primary"


async def test_an_over_long_question_is_rejected_before_generation(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    async with answering(client, module_database, embedder, llm_engine, ingested) as (_, rag, _m):
        question = "Why is the sky blue? " * 380  # ~7,600 characters
        handle = await rag.start_ask(
            AskRequest(tenant="t", question=question, max_answer_tokens=64)
        )
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        history = await handle.fetch_history()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == policies.PROMPT_TOO_LONG and cause.non_retryable
    assert "tokens" in cause.message
    scheduled = [
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == [], "nothing may run for a question that cannot fit"


async def test_rerank_orders_the_context_by_the_rerankers_scores(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    ingested: Path,
) -> None:
    reranker = load_reranker(PACKAGED_RERANKER, Settings().data_dir.resolve(), "cpu")
    request = AskRequest(tenant="t", question=QUESTION, max_answer_tokens=8, top_k=5)
    async with answering(client, module_database, embedder, llm_engine, ingested) as (_, rag, _m):
        fused = await rag.ask(request)
    async with answering(
        client,
        module_database,
        embedder,
        llm_engine,
        ingested,
        reranker=reranker,
        reranker_model=PACKAGED_RERANKER,
    ) as (_, rag, _m):
        reranked = await rag.ask(request)
        await save_history(client, reranked.trace_id, "answer-reranked")
    assert not fused.reranked and reranked.reranked and "rerank" in reranked.timings_ms
    scores = [c.score for c in reranked.context]
    assert scores == sorted(scores, reverse=True), "context follows the reranker's scores"
    texts = dict(
        module_database.rows(
            "SELECT id, text FROM chunks WHERE id = ANY(%s)", [c.chunk_id for c in reranked.context]
        )
    )
    direct = reranker.score(reranked.query, [texts[c.chunk_id] for c in reranked.context])
    assert direct == pytest.approx(scores, abs=1e-5)
    assert [c.chunk_id for c in reranked.context] != [c.chunk_id for c in fused.context], (
        "the reranker's scores differ from retrieval's, so the order must change"
    )
