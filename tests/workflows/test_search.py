"""Live searches: one workflow task and no task queue crossed, and an ingest running beside them
degrades none of them (issue 16's "a search run during an ingest is not degraded")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from ragkit.embedding import Embedder
from tests.conftest import Database, Stack, copy_documents, running_stack
from tests.workflows.test_answer import DOCUMENTS
from tests.workflows.test_ingest import save_history

pytestmark = pytest.mark.integration

BULK_DOCUMENTS = 30


async def remote_dispatches(client: Client, workflow_id: str) -> int:
    """Activities scheduled on a task queue (local activities are markers, not tasks)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in history.events)


async def test_a_search_during_an_ingest_is_not_degraded_and_crosses_no_task_queue(
    stack: Stack, tmp_path: Path
) -> None:
    rag = await stack.rag()
    seed = copy_documents(DOCUMENTS, tmp_path / "seed")
    assert not (await rag.ingest([str(seed)], tenant="t")).failures
    bulk = tmp_path / "bulk"
    bulk.mkdir()
    # ~90 chunks: the index worker embeds for ~15 s on 2 CPUs, past the searches' twenty.
    for n in range(BULK_DOCUMENTS):
        (bulk / f"log-{n:03d}.md").write_text(
            f"# Ship's log {n}\n\n"
            + " ".join(
                f"On day {n * 3 + k} the crew of vessel {n} logged wind {k} knots and counted "
                f"{n + k * 7} gulls off the northern cape."
                for k in range(40)
            )
        )
    handle = await rag.start_ingest(rag.ingest_request([str(bulk)], "t"))
    question = "Where did the Great Fire of London begin?"
    during = []
    while len(during) < 20:
        found = await rag.search(question, tenant="t", top_k=3)
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            break  # this one may have run after the ingest ended
        during.append(found)
        await asyncio.sleep(0.05)
    result = await handle.result()
    assert not result.failures and result.totals.documents_ingested == BULK_DOCUMENTS
    assert len(during) >= 5, f"only {len(during)} searches ran while the ingest did"
    for found in during:
        assert found.retrieval == "hybrid" and not found.degradations, found.degradations
        assert found.passages[0].source.endswith("great-fire-of-london.md"), found.passages[0]
    assert await remote_dispatches(stack.client, during[-1].trace_id) == 0


async def local_activities(client: Client, workflow_id: str) -> list[str]:
    """The local activities a run recorded, in order (their markers name them)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    found = []
    for event in history.events:
        if not event.HasField("marker_recorded_event_attributes"):
            continue
        marker = event.marker_recorded_event_attributes
        data = marker.details.get("data")
        if marker.marker_name == "core_local_activity" and data is not None and data.payloads:
            found.append(json.loads(data.payloads[0].data)["activity_type"])
    return found


@pytest.mark.parametrize("fusion", ["dbsf", "zscore"])
async def test_hybrid_with_bm25_is_one_index_call_and_postgres_is_its_fallback(
    client: Client, database: Database, embedder: Embedder, tmp_path: Path, fusion: str
) -> None:
    """Issue 18: BM25 ranks keywords in the index, fused there (dbsf: one query) or here
    (zscore); Postgres full text runs only when the index fails (R9)."""
    corpus = copy_documents(DOCUMENTS, tmp_path / "corpus")
    async with running_stack(
        client, database, embedder, tmp_path / "data", fusion_method=fusion
    ) as stack:
        rag = await stack.rag()
        assert not (await rag.ingest([str(corpus)], tenant="t")).failures
        question = "Where did the Great Fire of London begin?"
        for mode in ("hybrid", "keyword"):
            found = await rag.search(question, tenant="t", top_k=3, mode=mode)
            assert found.passages[0].source.endswith("great-fire-of-london.md"), found.passages
            assert not found.degradations
            assert found.retrieval == ("hybrid" if mode == "hybrid" else "keyword_only")
            # One index call, then hydration: no Postgres keyword search, no task queue.
            assert await local_activities(client, found.trace_id) == [
                "search_vectors",
                "hydrate_hits",
            ]
            assert await remote_dispatches(client, found.trace_id) == 0
            if mode == "hybrid":
                await save_history(client, found.trace_id, f"search-bm25-{fusion}")
    # The index gone (nobody serves its read socket): Postgres full text serves alone.
    async with running_stack(
        client,
        database,
        embedder,
        tmp_path / "data",
        with_index_worker=False,
        fusion_method=fusion,
        activity_policies={"search_vectors": {"schedule_to_close_seconds": 2}},
    ) as stack:
        rag = await stack.rag()
        found = await rag.search(question, tenant="t", top_k=3)
        assert found.retrieval == "keyword_only", found
        assert any("Postgres full-text search served alone" in d for d in found.degradations)
        assert found.passages[0].source.endswith("great-fire-of-london.md")
        assert await local_activities(client, found.trace_id) == [
            "search_vectors",
            "keyword_search",
            "hydrate_hits",
        ]
