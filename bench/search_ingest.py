"""Row 3 of bench/serving.py: search during an ingest, on the embedded stack as processes (a user's
run: bulk ingest and live search contend as they would)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from bench.hops import dispatch_counts, histories, hop_rows
from bench.load import QUESTIONS, SEED_DOCUMENTS, WARMUP
from bench.stack import ProcessStack
from durable_rag.client import RagClient
from durable_rag.stack.postgres import migrate
from durable_rag.stack.workers import ROOT
from ragkit.temporal import connect


def start_stack_for_search(stack: ProcessStack) -> None:
    """Temporal, Postgres, the orchestrator and the index worker: what search uses."""
    stack.temporal.start()
    stack.postgres.start()
    stack.postgres.ensure_database(stack.settings.postgres.database)
    migrate(stack.settings.postgres.sqlalchemy_url)
    for kind in ("orchestrator", "index"):
        stack.start_worker(kind)


def write_documents(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        (folder / f"note-{n:05d}.md").write_text(
            f"# Field note {n}\n\n"
            + "\n\n".join(
                f"Observation {n}-{j}: the survey team zq{n}x{j} recorded "
                f"{(n * 7 + j) % 97} birds near marker {j} at dawn."
                for j in range(3)
            )
            + "\n"
        )


async def search_during_ingest(requests: int, documents: int) -> dict[str, Any]:
    stack = ProcessStack("serving")
    try:
        await asyncio.to_thread(start_stack_for_search, stack)
        client = await connect(stack.settings)
        rag = RagClient(client, stack.settings)
        seed = stack.work / "seed"
        seed.mkdir()
        for name in SEED_DOCUMENTS:
            shutil.copy(ROOT / "corpus" / name, seed)
        assert not (await rag.ingest([str(seed)])).failures
        bulk = stack.work / "bulk"
        write_documents(bulk, documents)
        calls: list[tuple[str, float, float]] = []
        steps: dict[str, dict[str, list[float]]] = {"idle": {}, "ingest": {}}
        counter = iter(range(10**9))

        async def search(state: str | None) -> float:
            n = next(counter)
            called_at, began = time.time(), time.perf_counter()
            found = await rag.search(QUESTIONS[n % len(QUESTIONS)])
            took = (time.perf_counter() - began) * 1000
            if state is not None:
                calls.append((found.trace_id, called_at, time.time()))
                for step, ms in found.timings_ms.items():
                    steps[state].setdefault(step, []).append(ms)
            return took

        for _ in range(WARMUP * 3):
            await search(None)
        idle = [await search("idle") for _ in range(requests // 2)]
        handle = await rag.start_ingest(rag.ingest_request([str(bulk)]))
        ingest_began = time.perf_counter()
        result = asyncio.ensure_future(handle.result())
        during: list[float] = []
        idle_calls = len(calls)
        while not result.done():
            during.append(await search("ingest"))
        ingest_seconds = time.perf_counter() - ingest_began
        ingested = result.result()
        during_calls = calls[idle_calls:]
        idle += [await search("idle") for _ in range(requests - requests // 2)]
        idle_hops = await histories(client, calls[:idle_calls] + calls[idle_calls + len(during) :])
        ingest_hops = await histories(client, during_calls)
        return {
            "idle_ms": idle, "ingest_ms": during, "ingest_seconds": ingest_seconds,
            "documents": documents, "ingest_failures": len(ingested.failures),
            "hops": hop_rows("search idle", idle_hops, steps["idle"], {})
            + hop_rows("search during ingest", ingest_hops, steps["ingest"], {}),
            "counts": dispatch_counts(idle_hops + ingest_hops),
        }  # fmt: skip
    finally:
        await asyncio.to_thread(stack.close)
