"""Orchestrator worker: every workflow, plus the activities that touch files and Postgres.

One process, two workers with their own slots and threads:
- bulk, queue settings.workflow_task_queue (rag-workflows): every workflow (ingest, delete,
  compaction, rebuild, evaluation, and runs of the others started there) and every activity;
- live, queue settings.live_task_queue (rag-live): search, answer and conversation workflows and
  their local activities, so a live question never waits behind a bulk workflow's task or a
  staging batch.

Live retrieval is local: this process embeds the query with its own copy of the embedding model
(whose tokenizer also chunks documents) and reads the index through `ragkit.index.reads`.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.answer_cache import AnswerCacheActivities
from activities.costs import CostActivities
from activities.documents import DocumentActivities
from activities.evaluation import EvaluationActivities
from activities.history import HistoryActivities
from activities.retrieval import RetrievalActivities
from activities.runs import RunActivities
from activities.tenants import TenantActivities
from ragkit import tracing
from ragkit.db import make_sessionmaker
from ragkit.embedding import Embedder
from ragkit.index.factory import bm25_encoder
from ragkit.index.reads import IndexReader
from ragkit.logs import setup_logging
from ragkit.parsing.isolation import IsolatedParser, ParseLimits, Parser
from ragkit.settings import Settings
from ragkit.temporal import connect
from workers.build import deployment_config
from workers.common import (
    load_embedder_for,
    make_runtime,
    open_reader,
    run_until_signalled,
    worker_interceptors,
    workflow_runner,
)
from workflows.answer import AnswerWorkflow
from workflows.compaction import CompactionWorkflow
from workflows.conversation import ConversationWorkflow
from workflows.delete_document import DeleteDocumentWorkflow
from workflows.delete_tenant import DeleteTenantWorkflow
from workflows.evaluation import EvaluationWorkflow
from workflows.forget import ForgetRunsWorkflow
from workflows.forget_document import ForgetDocumentWorkflow
from workflows.ingest import IngestWorkflow
from workflows.rebuild import RebuildIndexWorkflow
from workflows.search import SearchWorkflow

WORKFLOWS = [
    IngestWorkflow,
    SearchWorkflow,
    AnswerWorkflow,
    ConversationWorkflow,
    DeleteDocumentWorkflow,
    CompactionWorkflow,
    RebuildIndexWorkflow,
    EvaluationWorkflow,
    ForgetRunsWorkflow,
    ForgetDocumentWorkflow,
    DeleteTenantWorkflow,
]
# What the live worker runs: the flows a person waits on.
LIVE_WORKFLOWS = [SearchWorkflow, AnswerWorkflow, ConversationWorkflow]
log = logging.getLogger(__name__)


def isolated_parser(settings: Settings) -> IsolatedParser:
    """Documents parsed in child processes under the settings' limits (and failpoints, when a
    fault run sets them)."""
    ingest = settings.ingest
    limits = ParseLimits(
        ingest.parse_cpu_seconds, ingest.parse_memory_mb, ingest.parse_timeout_seconds
    )
    return IsolatedParser(limits, failpoints_file=settings.worker.failpoints_file)


def build_worker(
    client: Client,
    settings: Settings,
    sessions: sessionmaker[Session],
    embedder: Embedder,
    reader: IndexReader,
    executor: ThreadPoolExecutor,
    task_queue: str | None = None,
    live: bool = False,
    parser: Parser | None = None,
) -> Worker:
    """The bulk worker, or with `live` the live one (live flows and their local activities).
    `parser` reads documents (default: child processes under the settings' limits)."""
    documents = DocumentActivities(
        sessions,
        embedder.tokenizer,
        chunk_tokens=settings.ingest.chunk_tokens,
        chunk_overlap=settings.ingest.chunk_overlap,
        max_document_bytes=settings.ingest.max_document_bytes,
        parser=parser or isolated_parser(settings),
    )
    cache = AnswerCacheActivities(sessions)
    costs = CostActivities(sessions)
    history = HistoryActivities(sessions)
    evaluation = EvaluationActivities(sessions)
    tenants = TenantActivities(sessions)
    runs = RunActivities(client)
    retrieval = RetrievalActivities(embedder, reader, bm25_encoder(settings))
    answering: list[Any] = [
        retrieval.search_vectors,
        documents.hydrate_hits,
        documents.keyword_search,
        cache.lookup_cached_answer,
        cache.store_answer,
        costs.record_cost,
        costs.record_shadow,
        history.load_conversation,
        history.append_turn,
        history.save_summary,
        history.delete_conversation,
        history.forget_conversation,
    ]
    bulk: list[Any] = [
        documents.discover_files,
        documents.stage_batch,
        documents.commit_batch,
        documents.discard_pending,
        documents.tombstone_document,
        documents.purge_document,
        documents.purge_dead_chunks,
        documents.chunk_stats,
        documents.vacuum_chunks,
        documents.rewrite_tables,
        costs.purge_transcripts,
        costs.purge_expired,
        costs.forget_document_answers,
        evaluation.store_eval_report,
        runs.forget_runs,
        runs.wait_for_open_answers,
        tenants.close_tenant,
        tenants.purge_tenant,
    ]
    t, w = settings.temporal, settings.worker
    return Worker(
        client,
        task_queue=task_queue or (t.live_task_queue if live else t.workflow_task_queue),
        deployment_config=deployment_config(settings, "orchestrator"),
        interceptors=worker_interceptors(settings),
        graceful_shutdown_timeout=timedelta(seconds=w.drain_seconds),
        workflows=LIVE_WORKFLOWS if live else WORKFLOWS,
        workflow_runner=workflow_runner(),
        activities=answering if live else answering + bulk,
        activity_executor=executor,
        max_concurrent_activities=w.live_max_concurrent_activities
        if live
        else w.max_concurrent_activities,
        max_concurrent_local_activities=w.live_max_concurrent_activities
        if live
        else w.max_concurrent_activities,
        max_cached_workflows=w.max_cached_workflows,
    )


def build_workers(
    client: Client,
    settings: Settings,
    sessions: sessionmaker[Session],
    embedder: Embedder,
    reader: IndexReader,
    executor: ThreadPoolExecutor,
    live_executor: ThreadPoolExecutor,
    parser: Parser | None = None,
) -> list[Worker]:
    """The bulk and the live worker of one orchestrator process, each with its own threads."""
    return [
        build_worker(client, settings, sessions, embedder, reader, executor, parser=parser),
        build_worker(client, settings, sessions, embedder, reader, live_executor, live=True),
    ]


async def main(settings: Settings) -> None:
    setup_logging(settings)
    tracing.setup(settings, "orchestrator")
    embedder = load_embedder_for(settings)
    sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    reader = open_reader(settings, sessions, embedder)
    client = await connect(settings, make_runtime(settings))
    with (
        ThreadPoolExecutor(settings.worker.max_concurrent_activities) as executor,
        ThreadPoolExecutor(settings.worker.live_max_concurrent_activities) as live_executor,
    ):
        bulk, live = build_workers(
            client, settings, sessions, embedder, reader, executor, live_executor
        )
        await run_until_signalled(bulk, live, promote=settings.worker.promote)
    reader.close()


if __name__ == "__main__":
    asyncio.run(main(Settings()))
