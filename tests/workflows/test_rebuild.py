"""RebuildIndexWorkflow: a new generation under load, a worker killed midway, and the grace period.

Acceptance checks 3, 4 and 6 of the index-operations issue.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from activities.vector_index import VectorIndexActivities
from durable_rag.client import RagClient
from durable_rag.stack.process import Process
from durable_rag.stack.temporal import TemporalDevServer
from durable_rag.stack.workers import spawn_worker, wait_worker_ready
from ragkit.policies import PolicyTable
from schemas.rebuild import (
    CopyChunksInput,
    CopyChunksOutput,
    GenerationNameInput,
    GenerationRef,
    RebuildInput,
    VerifyInput,
    VerifyOutput,
)
from tests.conftest import Database, Stack, copy_documents, make_settings, running_stack
from tests.workflows.conftest import start_time_skipping
from tests.workflows.standins import stand_in
from tests.workflows.test_compaction import FIRST, LATER
from tests.workflows.test_ingest import save_history
from tests.workflows.test_ingest_faults import worker_env
from tests.workflows.test_search import local_activities
from workflows.calls import PolicyTableInterceptor
from workflows.rebuild import RebuildIndexWorkflow

pytestmark = pytest.mark.integration


def generations(db: Database) -> dict[str, str]:
    return dict(db.rows("SELECT name, status FROM index_generations ORDER BY id"))


@pytest.mark.slow
async def test_a_rebuild_under_queries_and_ingests_switches_with_no_failed_or_empty_answer(
    stack: Stack, tmp_path: Path
) -> None:
    rag = RagClient(stack.client, stack.settings.model_copy(update={"rebuild_batch_size": 8}))
    assert not (
        await rag.ingest([str(copy_documents(FIRST, tmp_path / "first"))], tenant="t")
    ).failures
    collection = stack.settings.index.collection
    assert generations(stack.database) == {collection: "active"}

    results: list[tuple[int, list[str]]] = []
    done = asyncio.Event()

    async def keep_searching() -> None:
        while not done.is_set():
            found = await rag.search("Why do tides rise and fall?", "t", top_k=3, mode="dense")
            results.append((len(found.passages), found.degradations))

    searching = asyncio.create_task(keep_searching())
    handle = await rag.start_rebuild(grace_seconds=1)
    ingested = await rag.ingest([str(copy_documents(LATER, tmp_path / "later"))], tenant="t")
    report = await handle.result()
    done.set()
    await searching

    assert not ingested.failures
    assert len(results) >= 3 and all(n > 0 and not d for n, d in results), results
    assert report.previous == collection and report.active != collection
    assert report.chunks_copied > 8, "the copy ran in several batches"
    assert report.dropped_previous
    assert generations(stack.database) == {collection: "dropped", report.active: "active"}
    assert not (stack.settings.index_path / collection).exists()
    # What was ingested during the rebuild is in the new generation.
    fire = await rag.search("Where did the Great Fire of London begin?", "t", 3, mode="dense")
    assert "great-fire-of-london.md" in fire.passages[0].source
    check = await rag.compact()
    assert check.points_removed == 0 and check.counts_match, check
    await save_history(stack.client, report.workflow_id, "rebuild")


@pytest.mark.slow
async def test_a_rebuild_killed_midway_resumes_and_the_old_generation_keeps_serving(
    temporal_server: TemporalDevServer, client: Client, database: Database, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    override = {"copy_chunks": {"start_to_close_seconds": 20, "initial_interval_seconds": 0.5}}
    settings = make_settings(
        database_url=database.url,
        data_dir=data_dir,
        temporal_address=temporal_server.address,
        rebuild_batch_size=8,
        activity_policies=override,
    )
    env = worker_env(
        {
            "database_url": database.url,
            "data_dir": str(data_dir),
            "temporal_address": temporal_server.address,
            "workflow_task_queue": settings.temporal.workflow_task_queue,
            "index_task_queue": settings.temporal.index_task_queue,
            "live_task_queue": settings.temporal.live_task_queue,
            "rebuild_batch_size": "8",
            "activity_policies": json.dumps(override),
        }
    )

    def start(kind: str) -> Process:
        process = spawn_worker(data_dir, kind, env)
        queue = (
            settings.temporal.index_task_queue
            if kind == "index"
            else settings.temporal.workflow_task_queue
        )
        wait_worker_ready(process, temporal_server.address, "default", queue)
        return process

    rag = RagClient(client, settings)
    orchestrator = await asyncio.to_thread(start, "orchestrator")
    index_worker = await asyncio.to_thread(start, "index")
    try:
        corpus = copy_documents(FIRST + LATER, tmp_path / "corpus")
        assert not (await rag.ingest([str(corpus)], tenant="t")).failures
        handle = await rag.start_rebuild(grace_seconds=0)
        deadline = time.monotonic() + 120
        while (await handle.query(RebuildIndexWorkflow.progress)).chunks_copied < 8:
            assert time.monotonic() < deadline, "the copy never started"
            await asyncio.sleep(0.05)
        index_worker.kill()  # SIGKILL, mid-copy
        status = generations(database)
        assert status[settings.index.collection] == "active", status
        assert "building" in status.values(), status
        index_worker = await asyncio.to_thread(start, "index")
        # The old generation serves while the rebuild goes on. The restarted worker's first
        # search loads its embedder beside the resumed copy: on a busy CI machine that once
        # outlasted the vector search's 2 s timeout (a keyword-only answer), so the first whole
        # answer within a minute counts, and the rebuild must still be running then.
        deadline = time.monotonic() + 60
        while True:
            found = await rag.search("What causes spring tides?", "t", 3, mode="dense")
            if (found.passages and not found.degradations) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert found.passages and not found.degradations, found.degradations
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        report = await asyncio.wait_for(handle.result(), timeout=300)
        found = await rag.search("What causes spring tides?", "t", 3, mode="dense")
        assert found.passages and not found.degradations
    finally:
        index_worker.stop()
        orchestrator.stop()
    assert report.active != settings.index.collection and report.dropped_previous
    live = database.scalar(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE d.status = 'active' AND c.version = d.version"
    )
    assert report.points == live
    assert generations(database)[report.active] == "active"


class StandIn:
    """Stand-in index activities: the grace-period test is about the workflow's timer."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @stand_in(VectorIndexActivities.begin_generation)
    async def begin_generation(self, request: RebuildInput) -> GenerationRef:
        self.calls.append("begin")
        return GenerationRef(name="chunks-g2", previous="chunks")

    @stand_in(VectorIndexActivities.copy_chunks)
    async def copy_chunks(self, request: CopyChunksInput) -> CopyChunksOutput:
        self.calls.append("copy")
        return CopyChunksOutput(copied=3, last=uuid.uuid4())

    @stand_in(VectorIndexActivities.verify_generation)
    async def verify_generation(self, request: VerifyInput) -> VerifyOutput:
        self.calls.append("verify")
        return VerifyOutput(
            points_active=3, points_new=3, added=0, removed=0, sample_queries_answered=1
        )

    @stand_in(VectorIndexActivities.activate_generation)
    async def activate_generation(self, request: GenerationNameInput) -> None:
        self.calls.append(f"activate {request.name}")

    @stand_in(VectorIndexActivities.drop_generation)
    async def drop_generation(self, request: GenerationNameInput) -> None:
        self.calls.append(f"drop {request.name}")


async def test_the_old_generation_is_dropped_only_after_the_grace_period() -> None:
    environment = await start_time_skipping()
    queue = f"rebuild-{uuid.uuid4().hex[:8]}"
    settings = make_settings(workflow_task_queue=queue, index_task_queue=queue)
    stand_in = StandIn()
    async with (
        environment,
        Worker(
            environment.client,
            task_queue=queue,
            interceptors=[PolicyTableInterceptor(PolicyTable.from_settings(settings))],
            workflows=[RebuildIndexWorkflow],
            activities=[
                stand_in.begin_generation,
                stand_in.copy_chunks,
                stand_in.verify_generation,
                stand_in.activate_generation,
                stand_in.drop_generation,
            ],
        ),
    ):
        grace = timedelta(hours=6)
        handle = await environment.client.start_workflow(
            RebuildIndexWorkflow.run,
            RebuildInput(batch_size=8, grace_seconds=grace.total_seconds()),
            id=f"rebuild-{queue}",
            task_queue=queue,
        )
        while (await handle.query(RebuildIndexWorkflow.progress)).stage != "grace":
            await asyncio.sleep(0.05)
        await environment.sleep(grace - timedelta(minutes=1))
        assert (await handle.query(RebuildIndexWorkflow.progress)).stage == "grace"
        assert stand_in.calls[-1] == "activate chunks-g2"
        report = await handle.result()
        assert stand_in.calls[-1] == "drop chunks"
        assert report.active == "chunks-g2" and report.dropped_previous


async def test_a_rebuild_gives_an_index_from_before_bm25_its_keyword_vectors(
    client: Client, database: Database, embedder: Any, tmp_path: Path
) -> None:
    """Issue 18: a generation created before BM25 serves hybrid searches with Postgres ranking
    the keywords; a rebuild (no downtime) makes one with BM25 vectors, and then a hybrid search
    is one index query."""
    data = tmp_path / "data"
    old = make_settings(data_dir=data, qdrant_collection="chunks").index_path / "chunks"
    old.mkdir(parents=True)
    qe.EdgeShard.create(
        str(old),
        qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=embedder.dimension, distance=qe.Distance.Cosine)
        ),
    ).close()
    async with running_stack(client, database, embedder, data) as stack:
        assert not stack.index.keyword
        rag = RagClient(stack.client, stack.settings.model_copy(update={"rebuild_batch_size": 8}))
        assert not (
            await rag.ingest([str(copy_documents(FIRST, tmp_path / "first"))], tenant="t")
        ).failures
        question = "Why do tides rise and fall?"
        before = await rag.search(question, "t", top_k=3)
        assert before.retrieval == "hybrid" and not before.degradations
        assert "tides" in before.passages[0].source
        assert await local_activities(client, before.trace_id) == [
            "search_vectors",
            "keyword_search",
            "hydrate_hits",
        ]
        report = await (await rag.start_rebuild(grace_seconds=1)).result()
        assert report.active != "chunks" and report.dropped_previous
        after = await rag.search(question, "t", top_k=3)
        assert after.retrieval == "hybrid" and not after.degradations
        assert "tides" in after.passages[0].source
        assert await local_activities(client, after.trace_id) == ["search_vectors", "hydrate_hits"]
        keyword = await rag.search("tides moon", "t", top_k=3, mode="keyword")
        assert "tides" in keyword.passages[0].source and not keyword.degradations
