"""ConversationWorkflow end to end: real Temporal, Postgres, Qdrant Edge, MiniLM and vLLM SmolLM2.

Acceptance checks of the conversations issue: a long conversation stays within its prompt budget
and is stored complete and in order; concurrent messages are applied one after the other; a fact
from turn 1 survives in the rolling summary; a failing summarizer loses nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import delete
from temporalio.client import Client, WorkflowExecutionStatus

from durable_rag.client import PROMPT_OVERHEAD_TOKENS, RagClient
from durable_rag.stack.process import Process
from durable_rag.stack.temporal import TemporalDevServer
from durable_rag.stack.workers import spawn_worker, wait_worker_ready
from ragkit.db import ServedModel
from ragkit.embedding import Embedder
from ragkit.ids import conversation_workflow_id
from ragkit.llm.engine import LLMEngine, VllmEngine
from ragkit.store import served_models
from schemas.answer import AnswerWorkflowInput
from schemas.conversation import ConversationHistory, ConversationKey
from tests.conftest import Database
from tests.workflows.test_answer import answering, ingest_sample
from tests.workflows.test_ingest import save_history
from tests.workflows.test_ingest_faults import worker_env
from workflows.conversation import ConversationWorkflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# A small window, so that a dozen short turns make the workflow summarize.
WINDOW = {
    "conversation_history_tokens": 240,
    "conversation_summary_tokens": 96,
    # A turn here outgrows the headroom on its own, so turns wait for folds (each several
    # seconds on the CPU engine, beside the answers): room for two of them on a slow machine.
    "conversation_fold_wait_seconds": 120,
}
# Small enough that six short exchanges overflow it whatever the replies say (ten turns of
# 24-token replies came to 232 tokens once, under WINDOW's 240).
TIGHT = {"conversation_history_tokens": 128, "conversation_summary_tokens": 64}
QUESTIONS = [
    "Who designed the UTF-8 encoding?",
    "Where did the Great Fire of London begin?",
    "What does photosynthesis produce?",
    "What causes spring tides?",
    "What is HNSW used for?",
    "Why were lighthouses built?",
]


@pytest.fixture(scope="module")
async def conversation_data(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return await ingest_sample(client, module_database, embedder, tmp_path_factory)


def key(conversation: str) -> ConversationKey:
    return ConversationKey(tenant="t", conversation_id=conversation)


def assert_complete_and_ordered(stored: ConversationHistory | None, turns: int) -> None:
    assert stored is not None
    assert [t.ordinal for t in stored.turns] == list(range(2 * turns))
    assert [t.role for t in stored.turns] == ["user", "assistant"] * turns
    for user, assistant in zip(stored.turns[::2], stored.turns[1::2], strict=True):
        # Each reply was made for the message right before it.
        assert assistant.trace_id.endswith(f"-{user.ordinal}"), (user, assistant)
        assert assistant.text


async def settled(rag: RagClient, conversation: str) -> None:
    """Wait until no summarization is running (it happens after the reply)."""
    handle = rag.client.get_workflow_handle(conversation_workflow_id("t", conversation))
    deadline = time.monotonic() + 120
    while (await handle.query(ConversationWorkflow.state, key(conversation))).summarizing:
        assert time.monotonic() < deadline, "summarization never finished"
        await asyncio.sleep(0.2)


async def test_twelve_turns_stay_in_budget_are_stored_in_order_and_keep_the_first_fact(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    conversation_data: Path,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with answering(
        client, module_database, embedder, llm_engine, conversation_data, **WINDOW
    ) as (_, rag, _model):
        budget = rag.settings.llm.max_model_len - 24
        first = await rag.chat(
            conversation, "My name is Ada Lovelace and I live in Paris.", "t", max_answer_tokens=24
        )
        replies = [first]
        for i in range(11):
            question = QUESTIONS[i % len(QUESTIONS)]
            replies.append(
                await rag.chat(conversation, question, "t", max_answer_tokens=24, top_k=2)
            )
            assert replies[-1].history_tokens <= WINDOW["conversation_history_tokens"]
            assert replies[-1].answer.tokens.prompt <= budget
        await settled(rag, conversation)
        stored = await rag.history(conversation, "t")
        await save_history(
            client, conversation_workflow_id("t", conversation), "conversation-fold-ahead"
        )
        handle = client.get_workflow_handle(conversation_workflow_id("t", conversation))
        state = await handle.query(ConversationWorkflow.state, key(conversation))
        turn = await client.get_workflow_handle(first.answer.trace_id).describe()
        live_timeout = rag.settings.temporal.live_task_timeout_seconds

    assert [r.turn for r in replies] == list(range(1, 24, 2))
    # A turn's answer is live work: a lost task of it comes back after the live task timeout.
    assert turn.raw_description.execution_config.default_workflow_task_timeout.seconds == (
        live_timeout
    )
    assert_complete_and_ordered(stored, 12)
    assert stored is not None and stored.summarized_through >= 1, "nothing was ever summarized"
    assert state.summary_failures == 0
    assert any(r.history_turns > 0 for r in replies), "no turn carried its history"
    # Folds run beside the next turns (the headroom), and a turn that would still leave turns
    # out waits for the fold in flight: a working summarizer never costs a prompt its history.
    assert [r.history_dropped for r in replies] == [0] * 12
    assert not [d for r in replies for d in r.answer.degradations if "left out of the prompt" in d]
    summary = stored.summary.lower()
    assert "ada" in summary or "lovelace" in summary or "paris" in summary, stored.summary


async def test_two_messages_at_once_are_applied_one_after_the_other(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    conversation_data: Path,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with answering(client, module_database, embedder, llm_engine, conversation_data) as (
        _,
        rag,
        _model,
    ):
        first, second = await asyncio.gather(
            rag.chat(conversation, QUESTIONS[0], "t", max_answer_tokens=16, top_k=2),
            rag.chat(conversation, QUESTIONS[1], "t", max_answer_tokens=16, top_k=2),
        )
        # The same message id again is the same message: applied once.
        again = await rag.chat(
            conversation, QUESTIONS[2], "t", message_id="m-1", max_answer_tokens=16, top_k=2
        )
        repeat = await rag.chat(
            conversation, QUESTIONS[2], "t", message_id="m-1", max_answer_tokens=16, top_k=2
        )
        stored = await rag.history(conversation, "t")

        removed = await rag.delete_conversation(conversation, "t")
        assert await rag.history(conversation, "t") is None
    assert sorted([first.turn, second.turn]) == [1, 3]
    assert again.turn == repeat.turn == 5
    assert_complete_and_ordered(stored, 3)
    assert removed == 6
    assert module_database.scalar("SELECT count(*) FROM turns") == 0 or (
        module_database.scalar(
            "SELECT count(*) FROM turns t JOIN conversations c ON c.id = t.conversation_id "
            "WHERE c.external_id = %s",
            conversation,
        )
        == 0
    )


async def test_a_failing_summarizer_loses_no_turn_and_the_prompt_stays_in_budget(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    conversation_data: Path,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with answering(
        client,
        module_database,
        embedder,
        llm_engine,
        conversation_data,
        activity_policies={"summarize": {"schedule_to_start_seconds": 1}},
        **TIGHT,
    ) as (_, rag, _model):
        # Nobody serves the summary model's queue: every summarization times out.
        rag.settings = rag.settings.model_copy(
            update={"conversation_summary_model": "nobody-summarizes"}
        )
        replies = []
        for i in range(6):
            replies.append(
                await rag.chat(conversation, QUESTIONS[i], "t", max_answer_tokens=24, top_k=2)
            )
            await settled(rag, conversation)
        stored = await rag.history(conversation, "t")
        handle = client.get_workflow_handle(conversation_workflow_id("t", conversation))
        state = await handle.query(ConversationWorkflow.state, key(conversation))

    assert state.summary_failures >= 1 and state.summarized_through == -1
    assert_complete_and_ordered(stored, 6)
    assert all(r.history_tokens <= TIGHT["conversation_history_tokens"] for r in replies)
    assert replies[-1].history_dropped > 0, "the oldest turns should have been trimmed"
    assert any("left out of the prompt" in d for d in replies[-1].answer.degradations)


async def test_killing_the_orchestrator_mid_turn_loses_no_turn_and_the_reply_arrives(
    temporal_server: TemporalDevServer,
    client: Client,
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    conversation_data: Path,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with answering(
        client, module_database, embedder, engine, conversation_data, with_orchestrator=False
    ) as (stack, rag, _model):
        settings = stack.settings
        env = worker_env(
            {
                "database_url": module_database.url,
                "data_dir": str(conversation_data),
                "temporal_address": temporal_server.address,
                "workflow_task_queue": settings.temporal.workflow_task_queue,
                "index_task_queue": settings.temporal.index_task_queue,
                "live_task_queue": settings.temporal.live_task_queue,
            }
        )

        def start_orchestrator() -> Process:
            process = spawn_worker(conversation_data, "orchestrator", env)
            wait_worker_ready(
                process, temporal_server.address, "default", settings.temporal.live_task_queue
            )
            return process

        orchestrator = await asyncio.to_thread(start_orchestrator)
        try:
            await rag.chat(conversation, QUESTIONS[0], "t", max_answer_tokens=16, top_k=2)
            turn = asyncio.ensure_future(
                rag.chat(conversation, QUESTIONS[1], "t", max_answer_tokens=96, top_k=2)
            )
            deadline = time.monotonic() + 120
            while engine.running_requests() == 0:
                assert time.monotonic() < deadline, "generation never started"
                await asyncio.sleep(0.02)
            orchestrator.kill()  # SIGKILL, mid-generation
            assert not turn.done()
            orchestrator = await asyncio.to_thread(start_orchestrator)
            reply = await asyncio.wait_for(turn, timeout=180)
        finally:
            orchestrator.stop()
        stored = await rag.history(conversation, "t")
    assert reply.turn == 3 and reply.answer.answer
    assert_complete_and_ordered(stored, 2)


async def test_it_continues_as_new_closes_when_idle_and_the_next_message_resumes_from_postgres(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    conversation_data: Path,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with answering(
        client,
        module_database,
        embedder,
        llm_engine,
        conversation_data,
        conversation_turns_per_run=2,
        conversation_idle_seconds=3,
    ) as (_, rag, _model):
        handle = client.get_workflow_handle(conversation_workflow_id("t", conversation))
        first_run = None
        for i in range(3):
            await rag.chat(conversation, QUESTIONS[i], "t", max_answer_tokens=16, top_k=2)
            if first_run is None:
                first_run = (await handle.describe()).run_id
        assert (await handle.describe()).run_id != first_run, "no continue-as-new after 2 turns"

        deadline = time.monotonic() + 60
        while (await handle.describe()).status != WorkflowExecutionStatus.COMPLETED:
            assert time.monotonic() < deadline, "the idle conversation did not close"
            await asyncio.sleep(0.5)

        reply = await rag.chat(conversation, QUESTIONS[3], "t", max_answer_tokens=16, top_k=2)
        stored = await rag.history(conversation, "t")
    assert reply.turn == 7, "a restarted workflow must go on from the stored turns"
    assert reply.history_turns > 0, "the restarted workflow reloaded no history"
    assert_complete_and_ordered(stored, 4)


async def test_reload_starts_a_new_run_from_postgres_and_ignores_another_conversation(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    conversation_data: Path,
) -> None:
    """What a document's delete sends a conversation that held a redacted reply: the run
    continues as new (so the old one can be deleted), and the conversation goes on."""
    conversation = f"r-{uuid.uuid4().hex[:8]}"
    async with answering(client, module_database, embedder, llm_engine, conversation_data) as (
        _,
        rag,
        _model,
    ):
        await rag.chat(conversation, QUESTIONS[0], "t", max_answer_tokens=8, top_k=1)
        handle = client.get_workflow_handle(conversation_workflow_id("t", conversation))
        first_run = (await handle.describe()).run_id
        await handle.signal(ConversationWorkflow.reload, key(f"{conversation}-other"))
        await handle.signal(ConversationWorkflow.reload, key(conversation))
        deadline = time.monotonic() + 30
        while (await handle.describe()).run_id == first_run:
            assert time.monotonic() < deadline, "no new run after reload"
            await asyncio.sleep(0.2)
        await save_history(client, handle.id, "conversation-reloaded", run_id=first_run)
        first = client.get_workflow_handle(handle.id, run_id=first_run)
        assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        reply = await rag.chat(conversation, QUESTIONS[1], "t", max_answer_tokens=8, top_k=1)
        stored = await rag.history(conversation, "t")
    assert reply.turn == 3 and reply.history_turns > 0, reply
    assert_complete_and_ordered(stored, 2)


async def test_a_turn_is_budgeted_for_the_context_its_model_is_served_with(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    conversation_data: Path,
) -> None:
    """The worker of the turn's model announced a context smaller than the gateway's setting:
    the turn's answer is planned for that context, not the conversation's start plan."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with answering(client, module_database, embedder, llm_engine, conversation_data) as (
        _,
        rag,
        model,
    ):
        served_models.announce(module_database.sessions, model, 1024)
        try:
            reply = await rag.chat(conversation, QUESTIONS[0], "t", max_answer_tokens=24, top_k=2)
        finally:
            with module_database.sessions.begin() as session:
                session.execute(delete(ServedModel).where(ServedModel.model == model))
        history = await client.get_workflow_handle(reply.answer.trace_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (answer_input,) = await client.data_converter.decode(
        started.input.payloads, [AnswerWorkflowInput]
    )
    assert answer_input.plan.model == model
    assert answer_input.plan.context_tokens == 1024 - 24 - PROMPT_OVERHEAD_TOKENS
    assert rag.settings.llm.max_model_len > 1024  # the start plan would have allowed more
    assert reply.answer.tokens.prompt <= 1024 - 24
