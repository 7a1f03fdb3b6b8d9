"""Crashes during a multi-batch ingest: worker SIGKILL and a Temporal server restart.

Acceptance checks 4 and 5 of the ingestion issue. Workers here are real processes
(`python -m workers.<kind>`), killed with SIGKILL as a crash would.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_rag.client import RagClient
from durable_rag.stack.process import Process, free_port
from durable_rag.stack.temporal import TemporalDevServer
from durable_rag.stack.workers import spawn_worker, wait_worker_ready
from ragkit.index import VectorIndex, open_index
from ragkit.temporal import connect
from schemas.ingest import IngestResult
from tests.conftest import Database, make_settings, running_stack
from tests.workflows.test_ingest import active_chunk_ids
from workflows.ingest import IngestWorkflow

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

DOCUMENTS = 24
BATCH = 4


def write_corpus(folder: Path, documents: int = DOCUMENTS) -> list[Path]:
    folder.mkdir(parents=True)
    files = []
    for i in range(documents):
        path = folder / f"report-{i:02d}.md"
        paragraphs = "\n\n".join(
            f"Station {i} logged reading {j}: pressure {1000 + i * 3 + j} hPa, wind {i + j} knots "
            f"from bearing {(i * 37 + j * 11) % 360} degrees, with visibility of {j + 2} km."
            for j in range(6)
        )
        path.write_text(f"# Weather station {i}\n\n## Readings\n\n{paragraphs}\n")
        files.append(path)
    return files


async def wait_for_batches(handle: WorkflowHandle, done: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            progress = await handle.query(IngestWorkflow.progress, "t")
            if progress.totals.batches_done >= done:
                return
        except Exception:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"ingest did not reach {done} batches in {timeout}s")


async def scheduled_counts(client: Client, workflow_id: str) -> dict[str, int]:
    """How many times each activity was scheduled (retries of one schedule are not counted)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    counts: dict[str, int] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            counts[name] = counts.get(name, 0) + 1
    return counts


def check_complete(result: IngestResult, database: Database, index: VectorIndex) -> None:
    assert result.failures == []
    assert result.totals.documents_ingested == DOCUMENTS
    assert result.totals.batches_done == DOCUMENTS // BATCH
    in_postgres = active_chunk_ids(database, "t")
    assert database.scalar("SELECT count(*) FROM chunks") == len(in_postgres)
    assert database.scalar("SELECT count(*) FROM documents WHERE status = 'active'") == DOCUMENTS
    points = [str(i) for i in index.point_ids("t")]
    assert len(points) == len(set(points)), "duplicated point"
    assert set(points) == in_postgres, "lost or extra chunks"


def worker_env(settings_values: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({f"DURABLE_RAG_{k.upper()}": v for k, v in settings_values.items()})
    return env


async def test_sigkill_workers_mid_ingest_resumes_at_the_running_batch(
    temporal_server: TemporalDevServer, client: Client, database: Database, embedder, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    data_dir = tmp_path / "data"
    policies_override = {
        "index_documents": {"heartbeat_seconds": 5, "initial_interval_seconds": 0.5},
        "stage_batch": {"start_to_close_seconds": 10, "initial_interval_seconds": 0.5},
        "commit_batch": {"start_to_close_seconds": 10, "initial_interval_seconds": 0.5},
        "purge_superseded": {"start_to_close_seconds": 10},
    }
    settings = make_settings(
        database_url=database.url,
        data_dir=data_dir,
        temporal_address=temporal_server.address,
        chunk_tokens=128,
        embedding_batch_size=2,
        ingest_batch_documents=BATCH,
        activity_policies=policies_override,
    )
    env = worker_env(
        {
            "database_url": database.url,
            "data_dir": str(data_dir),
            "temporal_address": temporal_server.address,
            "workflow_task_queue": settings.temporal.workflow_task_queue,
            "index_task_queue": settings.temporal.index_task_queue,
            "live_task_queue": settings.temporal.live_task_queue,
            "chunk_tokens": "128",
            "embedding_batch_size": "2",
            "activity_policies": json.dumps(policies_override),
        }
    )

    def start_workers() -> list[Process]:
        procs = [spawn_worker(data_dir, kind, env) for kind in ("orchestrator", "index")]
        for proc, queue in zip(
            procs,
            (settings.temporal.workflow_task_queue, settings.temporal.index_task_queue),
            strict=True,
        ):
            wait_worker_ready(proc, temporal_server.address, "default", queue)
        return procs

    rag = RagClient(client, settings)
    workers = await asyncio.to_thread(start_workers)
    try:
        handle = await rag.start_ingest(rag.ingest_request([str(corpus)], "t"))
        await wait_for_batches(handle, 2)
        progress_at_kill = (await handle.query(IngestWorkflow.progress, "t")).totals.batches_done
        for proc in workers:
            proc.kill()
        assert progress_at_kill < DOCUMENTS // BATCH, "ingest finished before the kill"
        workers = await asyncio.to_thread(start_workers)
        result = await asyncio.wait_for(handle.result(), timeout=300)
    finally:
        for proc in workers:
            proc.stop()

    index = open_index(settings, embedder.dimension)  # the workers are gone: we may open it
    try:
        check_complete(result, database, index)
    finally:
        index.close()
    # Resumed, not restarted: no batch was staged twice, no finished batch re-embedded.
    counts = await scheduled_counts(client, handle.id)
    assert counts["stage_batch"] == DOCUMENTS // BATCH
    assert counts["index_documents"] == DOCUMENTS // BATCH
    assert counts["discover_files"] == 1


async def test_temporal_server_restart_mid_ingest_completes(
    database: Database, embedder, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    server = TemporalDevServer(tmp_path / "temporal", free_port(), None, free_port())
    await asyncio.to_thread(server.start)
    try:
        client = await connect(make_settings(temporal_address=server.address))
        async with running_stack(
            client,
            database,
            embedder,
            tmp_path / "data",
            temporal_address=server.address,
            chunk_tokens=128,
            embedding_batch_size=2,
            ingest_batch_documents=BATCH,
        ) as stack:
            rag = await stack.rag()
            handle = await rag.start_ingest(rag.ingest_request([str(corpus)], "t"))
            await wait_for_batches(handle, 1)
            progress = await handle.query(IngestWorkflow.progress, "t")
            assert progress.totals.batches_done < DOCUMENTS // BATCH, "finished before restart"
            server.stop()
            await asyncio.sleep(2)
            await asyncio.to_thread(server.start)
            result = None
            deadline = time.monotonic() + 300
            while result is None:
                try:
                    result = await asyncio.wait_for(handle.result(), timeout=60)
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(1)
            check_complete(result, database, stack.index)
    finally:
        server.stop()
