"""Index worker: the vector index and the embedding model.

Queue: settings.index_task_queue (rag-index). In the embedded profile this process is the only
opener of the in-process index. It polls only once the model is loaded and the index is open
(readiness, R15), and refuses to start on a model/index dimension mismatch.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.rerank import RerankActivities
from activities.vector_index import VectorIndexActivities
from durable_rag.client import RagClient
from ragkit import tracing
from ragkit.cpus import nice_session
from ragkit.db import IndexGeneration, make_sessionmaker
from ragkit.disk import register_store_usage
from ragkit.embedding import Embedder
from ragkit.gpu import register_gpu_metrics
from ragkit.index import VectorIndex
from ragkit.index.factory import bm25_encoder
from ragkit.index.generations import Generations
from ragkit.index.reads import ActiveReader, ReadServer
from ragkit.logs import setup_logging
from ragkit.rerank import Reranker, load_reranker
from ragkit.settings import Settings
from ragkit.temporal import connect
from workers.build import deployment_config
from workers.common import (
    load_embedder_for,
    make_runtime,
    refuse_unless_cuda_works,
    run_until_signalled,
    worker_interceptors,
)

log = logging.getLogger(__name__)


def build_worker(
    client: Client,
    settings: Settings,
    index: VectorIndex | Generations,
    embedder: Embedder,
    sessions: sessionmaker[Session],
    executor: ThreadPoolExecutor,
    task_queue: str | None = None,
    reranker: Reranker | None = None,
) -> Worker:
    """`index`: the collection's generations, or an index already open (generation one)."""
    generations = (
        index
        if isinstance(index, Generations)
        else Generations(settings, sessions, embedder.name, embedder.dimension, opened=index)
    )
    vectors = VectorIndexActivities(generations, embedder, sessions, bm25_encoder(settings))
    reranking = RerankActivities(reranker)
    return Worker(
        client,
        task_queue=task_queue or settings.temporal.index_task_queue,
        deployment_config=deployment_config(settings, "index"),
        interceptors=worker_interceptors(settings),
        graceful_shutdown_timeout=timedelta(seconds=settings.worker.drain_seconds),
        activities=[
            vectors.index_documents,
            vectors.purge_superseded,
            vectors.delete_document_points,
            vectors.delete_tenant_points,
            vectors.index_stats,
            vectors.sweep_index,
            vectors.optimize_index,
            vectors.begin_generation,
            vectors.copy_chunks,
            vectors.verify_generation,
            vectors.activate_generation,
            vectors.drop_generation,
            vectors.dense_search,
            reranking.rerank,
        ],
        activity_executor=executor,
        max_concurrent_activities=settings.worker.max_concurrent_activities,
    )


def serve_reads(settings: Settings, generations: Generations) -> ReadServer | None:
    """Edge backend: serve the orchestrator's live searches on the read socket (this process is
    the index's one opener). A Qdrant server is read by the orchestrator directly."""
    if settings.index.backend != "edge":
        return None
    return ReadServer(
        settings.read_socket_path, ActiveReader(generations), generations.embedding_model
    ).start()


def yield_cpu_to_live_work(settings: Settings) -> None:
    """Embedded profile: this process embeds in bulk (ingest, rebuild) on the cores that also
    answer live questions; a lower CPU priority makes bulk embedding take the idle cycles."""
    if settings.profile == "embedded" and settings.worker.bulk_nice:
        # The session's too: the stack starts this worker in a session of its own.
        nice_session(os.nice(settings.worker.bulk_nice))


async def main(settings: Settings) -> None:
    setup_logging(settings)
    tracing.setup(settings, "index")
    if settings.embedding.device.startswith("cuda"):
        refuse_unless_cuda_works("the embedding model (DURABLE_RAG_EMBEDDING_DEVICE=cuda)")
    register_gpu_metrics()  # reports nothing where there is no NVIDIA driver
    register_store_usage(settings)  # the DiskFillingUp alert's figures
    embedder = load_embedder_for(settings)
    sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    generations = Generations(settings, sessions, embedder.name, embedder.dimension)
    active = generations.active_row()
    if generations.compatible(active):
        generations.handle(active)  # open it before polling: no query waits for it
    reranker = (
        load_reranker(
            settings.retrieval.reranker_model, settings.data_dir, settings.embedding.device
        )
        if settings.retrieval.reranker_model
        else None
    )
    client = await connect(settings, make_runtime(settings))

    reads = serve_reads(settings, generations)

    async def close_index() -> None:
        if reads is not None:
            reads.close()
        generations.close()

    with ThreadPoolExecutor(settings.worker.max_concurrent_activities) as executor:
        worker = build_worker(
            client, settings, generations, embedder, sessions, executor, reranker=reranker
        )
        reason = rebuild_reason(active, settings, embedder)
        if reason:
            # The index does not match the settings: build a generation that does, while the
            # current one (or keyword search, for another model's) keeps serving.
            log.warning("index generation %s: %s; starting a rebuild", active.name, reason)
            await RagClient(client, settings).start_rebuild()
        yield_cpu_to_live_work(settings)  # once loaded: a slow start would only delay readiness
        await run_until_signalled(worker, promote=settings.worker.promote, on_stop=close_index)


def rebuild_reason(active: IndexGeneration, settings: Settings, embedder: Embedder) -> str:
    """Why the active generation does not match this worker's settings, or ''."""
    if (active.embedding_model, active.dimension) != (embedder.name, embedder.dimension):
        return (
            f"built with {active.embedding_model} ({active.dimension}), the worker embeds with "
            f"{embedder.name} ({embedder.dimension})"
        )
    if (active.hnsw_m, active.hnsw_ef_construct) != (
        settings.index.hnsw_m,
        settings.index.hnsw_ef_construct,
    ):
        return (
            f"HNSW m={active.hnsw_m}, ef_construct={active.hnsw_ef_construct}; settings say "
            f"m={settings.index.hnsw_m}, ef_construct={settings.index.hnsw_ef_construct}"
        )
    return ""


if __name__ == "__main__":
    asyncio.run(main(Settings()))
