"""Deletion that forgets: a string planted in a conversation is, once the conversation is deleted,
found nowhere the project keeps text: no Postgres text column, no Temporal history or visibility
record (ConversationWorkflow's `delete`, then ForgetRunsWorkflow). A string planted in a document
leaves the answers that read it once the document is deleted (DeleteDocumentWorkflow)."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from activities.costs import REDACTED_REPLY
from activities.runs import SEARCH_WORKFLOW, RunActivities
from durable_rag.client import RagClient
from ragkit import ids
from ragkit.codec import open_in_place
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine
from schemas.answer import AskRequest
from schemas.documents import DocumentRef
from schemas.maintenance import DocumentForgotten, ForgetRunsInput, ForgetRunsOutput
from tests.conftest import Database
from tests.workflows.test_answer import answering, ingest_sample
from tests.workflows.test_ingest import save_history
from workflows.search import SearchWorkflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
async def forget_data(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return await ingest_sample(client, module_database, embedder, tmp_path_factory)


def in_postgres(database: Database, text: str) -> list[str]:
    """Every `table.column` of text or JSON whose rows hold `text`."""
    columns = database.rows(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'json', "
        "'jsonb')"
    )
    return [
        f"{table}.{column}"
        for table, column in columns
        if database.scalar(
            f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE %s', f"%{text}%"
        )
    ]


async def in_temporal(client: Client, text: str, since: datetime) -> list[str]:
    """Every run started since `since` whose history (inputs, results, updates, markers, memo,
    summaries) or visibility record holds `text`, its payloads opened: they are sealed (the
    default), so the server's bytes would hold it in no case."""
    codec = client.data_converter.payload_codec
    found: list[str] = []
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    async for run in client.list_workflows(f"StartTime >= '{stamp}'"):
        try:
            history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        except RPCError:  # deleted while listed
            continue
        events, info = list(history.events), run.raw_info
        open_in_place([*events, info], codec)
        blob = b"".join(e.SerializeToString() for e in events)
        if text.encode() in blob or text.encode() in info.SerializeToString():
            found.append(run.id)
    return found


async def gone_from_temporal(client: Client, text: str, since: datetime) -> None:
    """Wait until no run started since `since` holds `text`. The server deletes a run's history
    and visibility record in the background, once its close tasks are acked: ~4 s with the
    stack's ack interval of 1 s (DYNAMIC_CONFIG; bench/forget.py), 34 s or more with the
    server's default of 30 s (its delete task backs off 3 s x 1.5^n), which this does not wait
    out."""
    deadline = time.monotonic() + 40
    while left := await in_temporal(client, text, since):
        assert time.monotonic() < deadline, f"still in Temporal: {left}"
        await asyncio.sleep(0.5)


async def ingest_note(rag: RagClient, database: Database, note: Path) -> uuid.UUID:
    """Ingest one file for tenant `t`; its document id."""
    assert not (await rag.ingest([str(note)], tenant="t")).failures
    found = database.scalar(
        "SELECT id FROM documents WHERE tenant = 't' AND source LIKE %s", f"%{note.name}"
    )
    return uuid.UUID(str(found))


async def test_a_deleted_conversations_text_is_nowhere_in_postgres_or_temporal(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    forget_data: Path,
) -> None:
    since = datetime.now(UTC).replace(microsecond=0)
    planted = f"quokka{uuid.uuid4().hex[:10]}"
    conversation = f"forget-{uuid.uuid4().hex[:8]}"
    async with answering(client, module_database, embedder, llm_engine, forget_data) as (
        _,
        rag,
        _model,
    ):
        for message in (f"My codeword is {planted}. What is HNSW used for?", "Why tides?"):
            await rag.chat(conversation, message, "t", max_answer_tokens=8, top_k=1)
        workflow_id = ids.conversation_workflow_id("t", conversation)
        run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
        # The test can fail: the text is there to be found before the delete.
        assert "turns.text" in in_postgres(module_database, planted)
        assert "transcripts.messages" in in_postgres(module_database, planted)
        assert workflow_id in await in_temporal(client, planted, since)

        assert await rag.delete_conversation(conversation, "t") == 4
        await save_history(client, workflow_id, "conversation-forgotten")
        forget = client.get_workflow_handle(
            ids.forget_workflow_id(workflow_id, run_id), result_type=ForgetRunsOutput
        )
        report = await forget.result()
        await save_history(client, forget.id, "forget-runs")

    # The conversation's run and both answers (their shadows were never sampled).
    assert report.runs_deleted == 3 and report.runs_kept == 0, report
    assert in_postgres(module_database, planted) == []
    await gone_from_temporal(client, planted, since)
    assert await rag.history(conversation, "t") is None


async def test_a_deleted_documents_text_leaves_the_answers_that_read_it(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    forget_data: Path,
    tmp_path: Path,
) -> None:
    """Deleting a document forgets the answers that read it (answer_costs.read_documents):
    their transcripts, cache entries and runs go, and a conversation's reply built on it is
    redacted, while the user's own turn stays; the conversation reloads into a new run, and its
    run that held the reply is deleted too. The conversation goes on."""
    since = datetime.now(UTC).replace(microsecond=0)
    planted = f"narwhal{uuid.uuid4().hex[:10]}"
    note = tmp_path / "lighthouse.txt"
    note.write_text(
        "The lighthouse keeper\n\n"
        f"The lighthouse keeper on Skerry Island keeps the codeword {planted} in a brass box. "
        "He lights the lamp at dusk and writes the weather in a log every evening.\n"
    )
    question = "What does the lighthouse keeper on Skerry Island keep in a brass box?"
    conversation = f"doc-{uuid.uuid4().hex[:8]}"
    async with answering(client, module_database, embedder, llm_engine, forget_data) as (
        _,
        rag,
        _model,
    ):
        document = await ingest_note(rag, module_database, note)
        answer = await rag.ask(
            AskRequest(tenant="t", question=question, max_answer_tokens=8, top_k=2)
        )
        await rag.chat(conversation, question, "t", max_answer_tokens=8, top_k=2)
        found = await rag.search("lighthouse keeper brass box", "t", top_k=2)
        assert found.passages[0].document_id == document
        assert SearchWorkflow.__name__ == SEARCH_WORKFLOW  # what forget_runs lists by type
        chat = client.get_workflow_handle(ids.conversation_workflow_id("t", conversation))
        run_before = (await chat.describe()).run_id
        # The test can fail: the text is in the answers' records and runs before the delete.
        assert "transcripts.messages" in in_postgres(module_database, planted)
        assert answer.trace_id in await in_temporal(client, planted, since)

        deleted = await rag.delete_document(document, "t")
        await save_history(client, deleted.workflow_id, "delete-document")
        assert deleted.answers_forgotten == 2 and deleted.turns_redacted == 1, deleted
        forget = client.get_workflow_handle(
            deleted.forget_workflow_id, result_type=DocumentForgotten
        )
        report = await forget.result()
        await save_history(client, forget.id, "forget-document")
        # The answer, the turn's answer, the conversation's run that held the reply, the search.
        assert report.runs_deleted == 4 and report.late_answers == 0, report
        assert in_postgres(module_database, planted) == []
        await gone_from_temporal(client, planted, since)
        history = await rag.history(conversation, "t")
        assert history is not None
        assert [t.text for t in history.turns] == [question, REDACTED_REPLY]
        assert history.turns[1].citations == []
        # The conversation goes on, in its new run, from what Postgres holds.
        assert (await chat.describe()).run_id != run_before
        await rag.chat(conversation, "Why tides?", "t", max_answer_tokens=8, top_k=1)
    history = await rag.history(conversation, "t")
    assert history is not None and len(history.turns) == 4
    assert history.turns[1].text == REDACTED_REPLY


async def test_an_answer_in_flight_when_its_document_is_deleted_is_forgotten_once_it_ends(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    forget_data: Path,
    tmp_path: Path,
) -> None:
    """An answer that read the document before its tombstone writes its transcript after the
    delete's first pass: ForgetDocumentWorkflow waits for it to finish, then forgets it too."""
    since = datetime.now(UTC).replace(microsecond=0)
    planted = f"okapi{uuid.uuid4().hex[:10]}"
    note = tmp_path / "zoo.txt"
    note.write_text(
        "The zoo keeper\n\n"
        f"The zoo keeper in Antwerp feeds the animal called {planted} at noon every day, and "
        "writes what it ate in a green notebook.\n"
    )
    async with answering(client, module_database, embedder, llm_engine, forget_data) as (
        _,
        rag,
        _model,
    ):
        document = await ingest_note(rag, module_database, note)
        question = "Describe in detail what the zoo keeper in Antwerp does at noon every day."
        answering_run = await rag.start_ask(
            AskRequest(tenant="t", question=question, max_answer_tokens=128, top_k=2)
        )
        # Once generate is pending, the answer has read the passage; its rows come after.
        deadline = time.monotonic() + 30
        while not (await answering_run.describe()).raw_description.pending_activities:
            assert time.monotonic() < deadline, "the answer never reached generate"
            await asyncio.sleep(0.05)
        deleted = await rag.delete_document(document, "t")
        await answering_run.result()
        forget = client.get_workflow_handle(
            deleted.forget_workflow_id, result_type=DocumentForgotten
        )
        report = await forget.result()
        # Almost always the late pass's (generate takes seconds); either way it is forgotten.
        assert deleted.answers_forgotten + report.late_answers == 1, (deleted, report)
        assert report.runs_deleted >= 1, report
    assert in_postgres(module_database, planted) == []
    await gone_from_temporal(client, planted, since)


async def test_a_late_pass_skips_the_searches_the_first_pass_deleted(
    client: Client,
    module_database: Database,
    embedder: Embedder,
    llm_engine: LLMEngine,
    forget_data: Path,
    tmp_path: Path,
) -> None:
    """The server deletes a run in the background, so the late pass of a document's delete can
    still list a search the first pass deleted: the first pass hands its search runs on
    (`searches_deleted` -> `skip_runs`), and they are neither deleted nor counted twice (CI once
    counted 5 runs where 4 were deleted)."""
    since = datetime.now(UTC).replace(microsecond=0)
    note = tmp_path / "orchard.txt"
    note.write_text(
        "The orchard\n\nThe orchard behind the mill in Gdansk grows quinces and medlars, "
        "picked in late October.\n"
    )
    async with answering(client, module_database, embedder, llm_engine, forget_data) as (
        _,
        rag,
        _model,
    ):
        document = await ingest_note(rag, module_database, note)
        found = await rag.search("orchard behind the mill quinces medlars", "t", top_k=2)
        assert found.passages[0].document_id == document
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    query = f"WorkflowType = '{SEARCH_WORKFLOW}' AND StartTime >= '{stamp}'"
    deadline = time.monotonic() + 10
    while not (
        runs := [
            r
            async for r in client.list_workflows(query)
            if r.status == WorkflowExecutionStatus.COMPLETED
        ]
    ):
        assert time.monotonic() < deadline, "the search never showed as completed"
        await asyncio.sleep(0.2)
    assert len(runs) == 1, [r.id for r in runs]
    run_id = runs[0].run_id

    forget, env = RunActivities(client), ActivityEnvironment()
    request = ForgetRunsInput(
        workflow_ids=[],
        started_before=datetime.now(UTC),
        searches_of=DocumentRef(tenant="t", document_id=document),
    )
    skipped = await env.run(forget.forget_runs, request.model_copy(update={"skip_runs": [run_id]}))
    assert (skipped.runs_deleted, skipped.searches_deleted) == (0, []), skipped
    done = await env.run(forget.forget_runs, request)
    assert (done.runs_deleted, done.searches_deleted) == (1, [run_id]), done
