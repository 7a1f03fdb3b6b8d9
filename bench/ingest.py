"""Ingest throughput: IngestWorkflow against the same steps in a plain loop, in one run.

    .venv/bin/python bench/ingest.py [--copies N] [--batch-documents B] [--corpus FOLDER]

Both sides parse, chunk (MiniLM tokenizer, 512-token budget), embed with the same loaded MiniLM
model and upsert into a fresh Qdrant Edge index. The workflow side also stages and commits every
document in Postgres and runs each step as a Temporal activity (dev server, SQLite persistence):
that is the price of durability being measured. Services are started by the benchmark on free
ports and stopped at the end. Prints a table and the ratio workflow / plain loop (target >= 0.85).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

from activities.vector_index import embedding_text  # noqa: E402
from bench.services import local_workers, running  # noqa: E402
from durable_rag.client import RagClient  # noqa: E402
from durable_rag.stack.postgres import EmbeddedPostgres, migrate  # noqa: E402
from durable_rag.stack.process import free_port  # noqa: E402
from durable_rag.stack.temporal import TemporalDevServer  # noqa: E402
from ragkit import ids, parsing  # noqa: E402
from ragkit.chunking import chunk_document  # noqa: E402
from ragkit.db import make_sessionmaker  # noqa: E402
from ragkit.embedding import Embedder, load_embedder  # noqa: E402
from ragkit.index import IndexPoint, open_index  # noqa: E402
from ragkit.metrics import STEP_SECONDS  # noqa: E402
from ragkit.settings import PACKAGED_MINILM, Settings  # noqa: E402
from ragkit.temporal import connect  # noqa: E402


def make_corpus(target: Path, copies: int, corpus: Path = ROOT / "corpus") -> list[Path]:
    for n in range(copies):
        shutil.copytree(corpus, target / f"copy-{n}")
        for name in ("README.md", "ARCHITECTURE.md"):
            shutil.copy(ROOT / name, target / f"copy-{n}" / name)
    return sorted(p for p in target.rglob("*") if p.is_file())


def plain_loop(files: list[Path], settings: Settings, embedder: Embedder) -> tuple[int, float]:
    """The same parse/chunk/embed/upsert steps, one document after another, no durability."""
    index = open_index(settings, embedder.dimension)
    started = time.perf_counter()
    chunks = 0
    embed_s = 0.0
    batch: list[tuple[uuid.UUID, str, str, str]] = []

    def flush() -> None:
        nonlocal embed_s
        began = time.perf_counter()
        vectors = embedder.embed_passages([embedding_text(h, t) for _, h, t, _ in batch])
        embed_s += time.perf_counter() - began
        index.upsert(
            [
                IndexPoint(id=i, vector=v, payload={"tenant": "bench", "text": t, "source": s})
                for (i, _, t, s), v in zip(batch, vectors, strict=True)
            ]
        )
        batch.clear()

    for path in files:
        data = parsing.read_source(path, settings.ingest.max_document_bytes)
        doc = parsing.parse(data, parsing.content_type_for(str(path)), path.stem)
        drafts = chunk_document(
            doc, embedder.tokenizer, settings.ingest.chunk_tokens, settings.ingest.chunk_overlap
        )
        doc_id = ids.document_id("bench", str(path))
        for d in drafts:
            batch.append((ids.chunk_id(doc_id, 1, d.ordinal), d.heading_path, d.text, str(path)))
            if len(batch) >= embedder.passages_per_call:
                flush()
        chunks += len(drafts)
    if batch:
        flush()
    elapsed = time.perf_counter() - started
    assert index.count() == chunks
    index.close()
    print(f"plain loop: {embed_s:.1f} s of {elapsed:.1f} s in the embedding model")
    return chunks, elapsed


async def workflow_run(
    files_root: Path, settings: Settings, embedder: Embedder, temporal: TemporalDevServer
) -> tuple[int, float]:
    client = await connect(settings)
    sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    index = open_index(settings, embedder.dimension)
    with ThreadPoolExecutor(8) as executor:
        workers = [
            *local_workers(client, settings, sessions, index, embedder, executor),
        ]
        async with running(workers):
            rag = RagClient(client, settings)
            started = time.perf_counter()
            result = await rag.ingest([str(files_root)], tenant="bench")
            elapsed = time.perf_counter() - started
            request = rag.ingest_request([str(files_root)], "bench")
            await print_breakdown(client, ids.ingest_workflow_id(request))
    embed_s = sum(
        sample.value
        for metric in STEP_SECONDS.collect()
        for sample in metric.samples
        if sample.name.endswith("_sum") and sample.labels.get("step") == "embed"
    )
    print(f"workflow: {embed_s:.1f} s of {elapsed:.1f} s in the embedding model")
    assert not result.failures, result.failures
    assert index.count("bench") == result.totals.chunks_indexed
    index.close()
    return result.totals.chunks_indexed, elapsed


async def print_breakdown(client: Client, workflow_id: str) -> None:
    """Where the workflow's time went, from its history: time in each activity type."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    scheduled: dict[int, tuple[str, float]] = {}
    busy: dict[str, float] = {}
    first = last = None
    for event in history.events:
        at = event.event_time.ToDatetime().timestamp()
        first = first if first is not None else at
        last = at
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (name, at)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name, began = scheduled[
                event.activity_task_completed_event_attributes.scheduled_event_id
            ]
            busy[name] = busy.get(name, 0.0) + at - began
    print(f"\nworkflow breakdown (scheduled -> completed, summed; run {last - first:.1f} s):")  # type: ignore[operator]
    for name, seconds in sorted(busy.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<20} {seconds:8.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1, help="copies of the bundled corpus")
    parser.add_argument(
        "--corpus", type=Path, default=ROOT / "corpus", help="another corpus (an older one's)"
    )
    parser.add_argument("--batch-documents", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    files = make_corpus(work / "corpus", args.copies, args.corpus)
    pg = EmbeddedPostgres(work / "pg", free_port())
    temporal = TemporalDevServer(work / "temporal", free_port(), None, free_port())
    try:
        pg.start()
        pg.ensure_database("bench")
        temporal.start()
        base = {
            "database_url": pg.url("bench"),
            "temporal_address": temporal.address,
            "workflow_task_queue": f"bench-wf-{uuid.uuid4().hex[:6]}",
            "index_task_queue": f"bench-ix-{uuid.uuid4().hex[:6]}",
            "live_task_queue": f"bench-live-{uuid.uuid4().hex[:6]}",
            "ingest_batch_documents": args.batch_documents,
        }
        migrate(base["database_url"])
        embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, Settings().embedding.batch_size)
        embedder.embed_passages(["warm up the model"] * 8)

        plain_settings = Settings(data_dir=work / "plain", **base)
        plain_chunks, plain_s = plain_loop(files, plain_settings, embedder)
        wf_settings = Settings(data_dir=work / "wf", **base)
        wf_chunks, wf_s = asyncio.run(
            workflow_run(work / "corpus", wf_settings, embedder, temporal)
        )
    finally:
        temporal.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)

    plain_rate, wf_rate = plain_chunks / plain_s, wf_chunks / wf_s
    print(
        f"\nIngest benchmark: {len(files)} documents, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
    )
    print(f"{'mode':<34} {'documents':>9} {'chunks':>7} {'seconds':>8} {'chunks/s':>9}")
    print(
        f"{'plain loop (parse,chunk,embed,upsert)':<34} {len(files):>9} {plain_chunks:>7} {plain_s:>8.1f} {plain_rate:>9.2f}"
    )
    print(
        f"{'IngestWorkflow (durable)':<34} {len(files):>9} {wf_chunks:>7} {wf_s:>8.1f} {wf_rate:>9.2f}"
    )
    ratio = wf_rate / plain_rate
    print(
        f"\nratio workflow / plain loop: {ratio:.2f}  (target >= 0.85: {'met' if ratio >= 0.85 else 'NOT met'})"
    )
    if args.json:
        rows = [
            {"path": "plain loop", "chunks": plain_chunks, "seconds": plain_s, "chunks_per_s": plain_rate},
            {"path": "IngestWorkflow", "chunks": wf_chunks, "seconds": wf_s, "chunks_per_s": wf_rate},
        ]  # fmt: skip
        args.json.write_text(
            json.dumps(
                {
                    "name": "ingest",
                    "documents": len(files),
                    "rows": rows,
                    "ratio": ratio,
                    "target": "workflow / plain >= 0.85",
                    "met": ratio >= 0.85,
                }
            )
        )


if __name__ == "__main__":
    main()
