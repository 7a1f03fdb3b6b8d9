"""Answer latency: AnswerWorkflow against the same steps in a plain async function, in one run.

    .venv/bin/python bench/answer.py [--requests N] [--max-tokens T]

Both sides embed the question, search vector and keyword (in parallel), fuse, load passages from
Postgres, assemble the prompt and generate with the same in-process vLLM engine (SmolLM2 on CPU).
The difference per request is the price of orchestration: Temporal round trips, history writes,
payload conversion. Prints P50/P99 for both and the overhead in ms and as a ratio (target: at most
15 ms at P50 on the embedded stack).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

from activities.documents import DocumentActivities  # noqa: E402
from activities.vector_index import VectorIndexActivities  # noqa: E402
from bench.load import QUESTIONS, SEED_DOCUMENTS, percentile  # noqa: E402
from bench.services import bench_services, local_workers, running  # noqa: E402
from durable_rag.client import RagClient  # noqa: E402
from ragkit.db import make_sessionmaker  # noqa: E402
from ragkit.embedding import load_embedder  # noqa: E402
from ragkit.index import open_index  # noqa: E402
from ragkit.index.generations import Generations  # noqa: E402
from ragkit.llm.engine import EngineConfig, VllmEngine  # noqa: E402
from ragkit.llm.models import resolve_generator  # noqa: E402
from ragkit.retrieval import (  # noqa: E402
    SYSTEM_PROMPT,
    Scored,
    assemble_context,
    build_prompt,
    estimate_tokens,
    fuse,
)
from ragkit.settings import PACKAGED_MINILM  # noqa: E402
from ragkit.temporal import connect  # noqa: E402
from schemas.answer import AskRequest  # noqa: E402
from schemas.search import DenseSearchInput, HydrateInput, KeywordSearchInput, VectorHit  # noqa: E402
from workers import llm as llm_worker  # noqa: E402


async def main_async(requests: int, max_tokens: int, json_path: Path | None = None) -> None:
    async with bench_services("answer", llm_served_name=f"bench-{uuid.uuid4().hex[:6]}") as (
        work,
        settings,
    ):
        embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, settings.embedding.batch_size)
        index = open_index(settings, embedder.dimension)
        sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
        engine = VllmEngine(
            EngineConfig(
                model=resolve_generator(settings.llm.model, ROOT / ".data"),
                served_name=settings.llm.name,
                max_model_len=settings.llm.max_model_len,
                max_num_seqs=settings.llm.max_num_seqs,
                gpu_memory_utilization=settings.llm.gpu_memory_utilization,
                tensor_parallel_size=1,
                dtype=settings.llm.dtype,
                enforce_eager=True,
            )
        )
        client = await connect(settings)
        documents = DocumentActivities(sessions, embedder.tokenizer, 512, 0.15, 10**7)
        generations = Generations(
            settings, sessions, embedder.name, embedder.dimension, opened=index
        )
        vectors = VectorIndexActivities(generations, embedder, sessions)
        rag = RagClient(client, settings)
        corpus = work / "corpus"
        corpus.mkdir()
        for name in SEED_DOCUMENTS:
            shutil.copy(ROOT / "corpus" / name, corpus)

        async def plain(question: str) -> None:
            """The same steps, called directly: no Temporal."""
            request = AskRequest(question=question, max_answer_tokens=max_tokens)
            plan = rag.answer_plan(request.max_answer_tokens, request.top_k)

            candidates = plan.retrieval.candidates

            async def dense() -> list[VectorHit]:
                found = await asyncio.to_thread(
                    vectors.dense_search,
                    DenseSearchInput(tenant="default", query=question, limit=candidates),
                )
                return found.hits

            async def keyword() -> list[VectorHit]:
                found = await asyncio.to_thread(
                    documents.keyword_search,
                    KeywordSearchInput(tenant="default", query=question, limit=candidates),
                )
                return found.hits

            d, k = await asyncio.gather(dense(), keyword())
            fused = fuse(
                [Scored(str(h.chunk_id), h.score) for h in d],
                [Scored(str(h.chunk_id), h.score) for h in k],
            )
            hydrated = await asyncio.to_thread(
                documents.hydrate_hits,
                HydrateInput(
                    tenant="default",
                    hits=[VectorHit(chunk_id=uuid.UUID(s.key), score=s.score) for s in fused],
                    limit=10,
                ),
            )
            kept, _ = assemble_context(
                [(str(p.chunk_id), p.text, p.score) for p in hydrated.passages[:5]],
                plan.context_tokens - estimate_tokens(question),
                estimate_tokens,
            )
            messages = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": build_prompt(question, kept)},
            ]
            await engine.generate(messages, max_tokens, uuid.uuid4().hex)

        with ThreadPoolExecutor(8) as executor:
            workers = [
                *local_workers(client, settings, sessions, index, embedder, executor),
                llm_worker.build_worker(client, settings, engine),
            ]
            async with running(workers):
                result = await rag.ingest([str(corpus)])
                assert not result.failures
                plain_ms: list[float] = []
                flow_ms: list[float] = []
                steps: dict[str, list[float]] = {}
                for i in range(requests + 2):
                    question = QUESTIONS[i % len(QUESTIONS)]
                    # Alternate the two sides so drift on a noisy machine hits both alike.
                    started = time.perf_counter()
                    await plain(question)
                    p = (time.perf_counter() - started) * 1000
                    started = time.perf_counter()
                    answer = await rag.ask(
                        AskRequest(question=question, max_answer_tokens=max_tokens)
                    )
                    f = (time.perf_counter() - started) * 1000
                    if i >= 2:  # the first two warm caches
                        plain_ms.append(p)
                        flow_ms.append(f)
                        for step, ms in answer.timings_ms.items():
                            steps.setdefault(step, []).append(ms)
        engine.close()
        index.close()

    overhead = [f - p for f, p in zip(flow_ms, plain_ms, strict=True)]
    print(f"\nAnswer benchmark: {requests} requests, answers of at most {max_tokens} tokens, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'path':<28} {'P50 ms':>9} {'P99 ms':>9} {'mean ms':>9}")
    for name, values in (("plain async function", plain_ms), ("AnswerWorkflow", flow_ms)):
        print(f"{name:<28} {percentile(values, 0.5):>9.1f} {percentile(values, 0.99):>9.1f} "
              f"{statistics.fmean(values):>9.1f}")  # fmt: skip
    print("\nAnswerWorkflow steps, as the workflow timed them (P50 ms): " + ", ".join(
        f"{step} {percentile(v, 0.5):.1f}" for step, v in steps.items()))  # fmt: skip
    p50 = percentile(overhead, 0.5)
    print(f"\norchestration overhead per request: P50 {p50:.1f} ms, "
          f"P99 {percentile(overhead, 0.99):.1f} ms; ratio workflow/plain at P50 "
          f"{percentile(flow_ms, 0.5) / percentile(plain_ms, 0.5):.2f} "
          f"(target: overhead <= 15 ms at P50: {'met' if p50 <= 15 else 'NOT met'})")  # fmt: skip
    if json_path:
        rows = [
            {"path": name, "p50_ms": percentile(v, 0.5), "p99_ms": percentile(v, 0.99),
             "mean_ms": statistics.fmean(v)}
            for name, v in (("plain async function", plain_ms), ("AnswerWorkflow", flow_ms))
        ]  # fmt: skip
        json_path.write_text(json.dumps({
            "name": "answer", "requests": requests, "max_tokens": max_tokens, "rows": rows,
            "overhead_p50_ms": p50, "overhead_p99_ms": percentile(overhead, 0.99),
            "ratio_p50": percentile(flow_ms, 0.5) / percentile(plain_ms, 0.5),
            "steps_p50_ms": {k: percentile(v, 0.5) for k, v in steps.items()},
            "target": "orchestration overhead <= 15 ms at P50", "met": p50 <= 15,
        }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    asyncio.run(main_async(args.requests, args.max_tokens, args.json))


if __name__ == "__main__":
    main()
