"""The real services a benchmark runs on: Postgres and the Temporal dev server on free ports, in a
scratch folder that is removed afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Collection
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from durable_rag.stack.postgres import EmbeddedPostgres, migrate
from durable_rag.stack.process import free_port
from durable_rag.stack.temporal import TemporalDevServer
from ragkit.settings import Settings


@asynccontextmanager
async def bench_services(
    prefix: str, *, cpus: Collection[int] | None = None, **overrides: Any
) -> AsyncIterator[tuple[Path, Settings]]:
    """(scratch folder, settings pointing at the services, with uuid task queues); with `cpus`,
    Temporal and Postgres run on them (the serving CPUs beside a CPU engine, ragkit/cpus.py)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    pg = EmbeddedPostgres(work / "pg", free_port(), cpus)
    temporal = TemporalDevServer(work / "temporal", free_port(), None, free_port(), cpus=cpus)
    try:
        await asyncio.to_thread(pg.start)
        pg.ensure_database("bench")
        await asyncio.to_thread(temporal.start)
        migrate(pg.url("bench"))
        values: dict[str, Any] = {
            "database_url": pg.url("bench"),
            "data_dir": work / "data",
            "temporal_address": temporal.address,
            "workflow_task_queue": f"bench-wf-{uuid.uuid4().hex[:6]}",
            "index_task_queue": f"bench-ix-{uuid.uuid4().hex[:6]}",
            "live_task_queue": f"bench-live-{uuid.uuid4().hex[:6]}",
            # Workers in this process are unversioned (nothing makes a build current here);
            # bench/stack.py's processes run versioned, as `durable-rag up`.
            "worker_versioning": False,
            **overrides,
        }
        settings = Settings(**values)
        yield work, settings
    finally:
        temporal.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def local_workers(
    client: Any,
    settings: Settings,
    sessions: Any,
    index: Any,
    embedder: Any,
    executor: Any,
    live_executor: Any = None,
    parser: Any = None,
) -> list[Any]:
    """The orchestrator's bulk and live workers and the index worker, in this process, over one
    open index: live retrieval reads it directly, as the orchestrator reads a Qdrant server."""
    from ragkit.index.generations import Generations
    from ragkit.index.reads import ActiveReader
    from workers import index as index_worker
    from workers import orchestrator

    generations = Generations(settings, sessions, embedder.name, embedder.dimension, opened=index)
    return [
        *orchestrator.build_workers(
            client,
            settings,
            sessions,
            embedder,
            ActiveReader(generations),
            executor,
            live_executor or ThreadPoolExecutor(settings.worker.live_max_concurrent_activities),
            parser=parser,
        ),
        index_worker.build_worker(client, settings, generations, embedder, sessions, executor),
    ]


@asynccontextmanager
async def running(workers: list[Any]) -> AsyncIterator[None]:
    """Every worker started, and stopped (in reverse) on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(worker)
        yield
