"""Orchestrator worker: every workflow, plus the activities that touch files and Postgres.

Queue: settings.workflow_task_queue (rag-workflows). Light on memory: it loads the embedding
model's tokenizer (for chunking), never the weights.
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
from ragkit.db import make_sessionmaker
from ragkit.embedding import load_tokenizer
from ragkit.logs import setup_logging
from ragkit.settings import Settings
from ragkit.temporal import connect
from workers.common import make_runtime, run_until_signalled, worker_interceptors
from workflows.answer import AnswerWorkflow
from workflows.compaction import CompactionWorkflow
from workflows.conversation import ConversationWorkflow
from workflows.delete_document import DeleteDocumentWorkflow
from workflows.evaluation import EvaluationWorkflow
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
]
log = logging.getLogger(__name__)


def build_worker(
    client: Client,
    settings: Settings,
    sessions: sessionmaker[Session],
    tokenizer: Any,
    executor: ThreadPoolExecutor,
    task_queue: str | None = None,
) -> Worker:
    documents = DocumentActivities(
        sessions,
        tokenizer,
        chunk_tokens=settings.ingest.chunk_tokens,
        chunk_overlap=settings.ingest.chunk_overlap,
        max_document_bytes=settings.ingest.max_document_bytes,
    )
    cache = AnswerCacheActivities(sessions)
    costs = CostActivities(sessions)
    history = HistoryActivities(sessions)
    evaluation = EvaluationActivities(sessions)
    return Worker(
        client,
        task_queue=task_queue or settings.temporal.workflow_task_queue,
        interceptors=worker_interceptors(settings),
        graceful_shutdown_timeout=timedelta(seconds=settings.worker.drain_seconds),
        workflows=WORKFLOWS,
        activities=[
            documents.discover_files,
            documents.stage_batch,
            documents.commit_batch,
            documents.discard_pending,
            documents.tombstone_document,
            documents.purge_document,
            documents.purge_dead_chunks,
            documents.chunk_stats,
            documents.vacuum_chunks,
            documents.hydrate_hits,
            documents.keyword_search,
            cache.lookup_cached_answer,
            costs.purge_transcripts,
            costs.record_shadow,
            cache.store_answer,
            costs.record_cost,
            history.load_conversation,
            history.append_turn,
            history.save_summary,
            history.delete_conversation,
            evaluation.store_eval_report,
        ],
        activity_executor=executor,
        max_concurrent_activities=settings.worker.max_concurrent_activities,
    )


async def main(settings: Settings) -> None:
    setup_logging(settings)
    tokenizer = load_tokenizer(settings.embedding.model)
    sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    client = await connect(settings, make_runtime(settings))
    with ThreadPoolExecutor(settings.worker.max_concurrent_activities) as executor:
        worker = build_worker(client, settings, sessions, tokenizer, executor)
        await run_until_signalled(worker)


if __name__ == "__main__":
    asyncio.run(main(Settings()))
