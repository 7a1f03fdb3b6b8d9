"""CompactionWorkflow and the maintenance schedules against the real stack.

Acceptance checks 2 and 5 of the index-operations issue, and compaction under load.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from activities.costs import CostActivities
from durable_rag import schedules
from ragkit.index import IndexPoint
from schemas.maintenance import CompactionReport
from tests.activities.test_costs import answer_cost
from tests.conftest import Stack, copy_documents
from tests.workflows.test_ingest import assert_index_matches_postgres, save_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIRST = ["technology/unicode-and-utf-8.md", "history/lighthouses.md", "science/tides.txt"]
LATER = ["history/great-fire-of-london.md", "science/photosynthesis.md"]


async def test_compaction_removes_every_dead_row_and_point_and_the_counts_match(
    stack: Stack, tmp_path: Path
) -> None:
    rag = await stack.rag()
    result = await rag.ingest([str(copy_documents(FIRST, tmp_path / "first"))], tenant="t")
    assert not result.failures
    db = stack.database
    doc_id, doc_chunks = db.rows(
        "SELECT id::text, chunk_count FROM documents WHERE source LIKE %s", "%lighthouses.md"
    )[0]
    # What crashes and half-finished work leave behind: a tombstone whose cleanup never ran,
    # rows of a version that is neither active nor staged, and a point no chunk backs.
    db.execute("UPDATE documents SET status = 'deleted' WHERE id = %s", doc_id)
    db.execute(
        "INSERT INTO chunks (id, document_id, tenant, version, ordinal, text, token_count, "
        "heading_path, char_start, char_end) SELECT gen_random_uuid(), document_id, tenant, "
        "version + 40, ordinal, text, token_count, heading_path, char_start, char_end "
        "FROM chunks WHERE document_id <> %s",
        doc_id,
    )
    stale_rows = db.scalar("SELECT count(*) FROM chunks WHERE version > 40")
    orphan = uuid.uuid4()
    stack.index.upsert(
        [
            IndexPoint(
                orphan,
                [0.1] * stack.embedder.dimension,
                {"tenant": "t", "document_id": str(uuid.uuid4()), "version": 1},
            )
        ]
    )

    # A cost row past its retention goes with the rest.
    CostActivities(db.sessions).record_cost(answer_cost("answer-old", "t", "m", 1.0))
    db.execute("UPDATE answer_costs SET created_at = now() - interval '401 days'")

    report = await rag.compact(batch_size=10)  # small batches: the loop runs several times
    assert report.expired_removed == {
        "answer_costs": 1,
        "shadow_runs": 0,
        "answer_cache": 0,
        "eval_reports": 0,
    }
    assert report.chunks_removed == doc_chunks + stale_rows
    assert report.points_removed == doc_chunks + 1
    assert report.counts_match and report.points_after == report.live_chunks
    assert report.points_before - report.points_after == doc_chunks + 1
    assert report.degradations == []
    assert db.scalar("SELECT count(*) FROM chunks WHERE document_id = %s", doc_id) == 0
    assert orphan not in set(stack.index.point_ids())
    assert_index_matches_postgres(stack, "t")

    again = await rag.compact()
    assert (again.chunks_removed, again.points_removed) == (0, 0) and again.counts_match
    assert set(again.expired_removed.values()) == {0}


async def test_compaction_while_ingesting_and_searching_loses_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    rag = await stack.rag()
    assert not (
        await rag.ingest([str(copy_documents(FIRST, tmp_path / "first"))], tenant="t")
    ).failures
    db = stack.database
    db.execute(
        "UPDATE documents SET status = 'deleted' WHERE source LIKE %s", "%unicode-and-utf-8.md"
    )
    searches: list[int] = []
    done = asyncio.Event()

    async def keep_searching() -> None:
        while not done.is_set():
            found = await rag.search("Why do tides rise and fall?", tenant="t", top_k=3)
            assert found.degradations == [], found.degradations
            searches.append(len(found.passages))

    searching = asyncio.create_task(keep_searching())
    ingest = asyncio.create_task(
        rag.ingest([str(copy_documents(LATER, tmp_path / "later"))], tenant="t")
    )
    compaction = await rag.compact(batch_size=10)
    ingested = await ingest
    done.set()
    await searching
    assert not ingested.failures and ingested.totals.documents_ingested == len(LATER)
    assert compaction.chunks_removed > 0
    assert searches and all(n > 0 for n in searches), searches
    # Whatever the ingest staged while compaction ran is all there.
    final = await rag.compact()
    assert final.points_removed == 0 and final.counts_match
    assert_index_matches_postgres(stack, "t")
    await save_history(stack.client, final.workflow_id, "compaction")


async def test_schedules_apply_idempotently_and_a_trigger_runs_compaction(
    stack: Stack, client: Client
) -> None:
    settings = stack.settings.model_copy(update={"compaction_cron": "0 3 * * *"})
    try:
        assert await schedules.apply(client, settings) == [(schedules.COMPACTION, "created")]
        assert await schedules.apply(client, settings) == [(schedules.COMPACTION, "unchanged")]
        (view,) = await schedules.list_managed(client)
        assert view.cron == "0 3 * * *" and not view.paused
        assert view.next_runs and all((t.hour, t.minute) == (3, 0) for t in view.next_runs)

        moved = settings.model_copy(update={"compaction_cron": "30 4 * * 0"})
        assert await schedules.apply(client, moved) == [(schedules.COMPACTION, "updated")]
        (view,) = await schedules.list_managed(client)
        assert all((t.hour, t.minute, t.weekday()) == (4, 30, 6) for t in view.next_runs)

        await schedules.trigger(client, schedules.COMPACTION)
        for _ in range(300):
            (view,) = await schedules.list_managed(client)
            if view.recent_runs:
                break
            await asyncio.sleep(0.1)
        (run_id,) = view.recent_runs
        assert run_id.startswith("compact-")
        handle = client.get_workflow_handle(run_id, result_type=CompactionReport)
        report = await handle.result()
        assert report.counts_match
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED

        off = settings.model_copy(update={"compaction_cron": ""})
        assert await schedules.apply(client, off) == [(schedules.COMPACTION, "deleted")]
        assert await schedules.list_managed(client) == []
        with pytest.raises(ValueError, match="schedules apply"):
            await schedules.trigger(client, schedules.COMPACTION)
    finally:
        await schedules.apply(client, settings.model_copy(update={"compaction_cron": ""}))
