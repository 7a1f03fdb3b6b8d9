"""Live searches: one workflow task and no task queue crossed, and an ingest running beside them
degrades none of them (issue 16's "a search run during an ingest is not degraded")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from tests.conftest import Stack
from tests.workflows.test_ingest import build_corpus

pytestmark = pytest.mark.integration


async def remote_dispatches(client: Client, workflow_id: str) -> int:
    """Activities scheduled on a task queue (local activities are markers, not tasks)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in history.events)


async def test_a_search_during_an_ingest_is_not_degraded_and_crosses_no_task_queue(
    stack: Stack, tmp_path: Path
) -> None:
    rag = await stack.rag()
    build_corpus(tmp_path / "seed", minimum=1)
    assert not (await rag.ingest([str(tmp_path / "seed")], tenant="t")).failures
    bulk = tmp_path / "bulk"
    bulk.mkdir()
    for n in range(150):  # enough embedding to keep the index worker busy for a while
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
    while len(during) < 40:
        found = await rag.search(question, tenant="t", top_k=3)
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            break  # this one may have run after the ingest ended
        during.append(found)
        await asyncio.sleep(0.05)
    result = await handle.result()
    assert not result.failures and result.totals.documents_ingested == 150
    assert len(during) >= 5, f"only {len(during)} searches ran while the ingest did"
    for found in during:
        assert found.retrieval == "hybrid" and not found.degradations, found.degradations
        assert found.passages[0].source.endswith("great-fire-of-london.md"), found.passages[0]
    assert await remote_dispatches(stack.client, during[-1].trace_id) == 0
