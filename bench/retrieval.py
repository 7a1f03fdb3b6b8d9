"""Retrieval quality on a labelled set: dense vs keyword vs hybrid, plus a fusion sweep.

    .venv/bin/python bench/retrieval.py [--set stdlib] [--sweep]

Ingests the set's passages through IngestWorkflow into a fresh embedded stack (Postgres and the
Temporal dev server on free ports, the packaged MiniLM, Qdrant Edge), then runs every question
through SearchWorkflow in each mode and prints hit@1, hit@5 and MRR@10. `--sweep` adds z-score
fusion at several weights and reciprocal rank fusion, to choose the settings from figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

from bench.services import bench_services, local_workers, running  # noqa: E402
from durable_rag.client import RagClient  # noqa: E402
from evals.retrieval import Scores, evaluate, load_questions, table, write_corpus  # noqa: E402
from ragkit.db import make_sessionmaker  # noqa: E402
from ragkit.embedding import load_embedder  # noqa: E402
from ragkit.index import open_index  # noqa: E402
from ragkit.settings import PACKAGED_MINILM  # noqa: E402
from ragkit.temporal import connect  # noqa: E402

TENANT = "eval"


async def main_async(set_name: str, sweep: bool, json_path: Path | None = None) -> None:
    async with bench_services("retrieval") as (work, settings):
        embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, settings.embedding.batch_size)
        index = open_index(settings, embedder.dimension)
        sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
        client = await connect(settings)
        passages = write_corpus(set_name, work / "corpus")
        questions = load_questions(set_name)
        with ThreadPoolExecutor(8) as executor:
            workers = [
                *local_workers(client, settings, sessions, index, embedder, executor),
            ]
            async with running(workers):
                started = time.perf_counter()
                ingested = await RagClient(client, settings).ingest([str(work / "corpus")], TENANT)
                assert not ingested.failures, ingested.failures
                ingest_s = time.perf_counter() - started
                results: dict[str, Scores] = {}
                modes = await evaluate(RagClient(client, settings), questions, TENANT)
                for mode, scores in modes.items():
                    label = f"{mode} (z-score 0.7/0.3)" if mode == "hybrid" else f"{mode} only"
                    results[label] = scores
                if sweep:
                    variants: list[tuple[str, dict[str, Any]]] = [
                        (f"hybrid z-score dense {w:.1f}", {"fusion_dense_weight": w,
                                                            "fusion_keyword_weight": 1 - w})
                        for w in (0.3, 0.4, 0.5, 0.6, 0.8, 0.9)
                    ] + [("hybrid rrf k=60 (1/1)", {"fusion_method": "rrf",
                          "fusion_dense_weight": 1.0, "fusion_keyword_weight": 1.0})]  # fmt: skip
                    for label, update in variants:
                        rag = RagClient(client, settings.model_copy(update=update))
                        scored = await evaluate(rag, questions, TENANT, modes=("hybrid",))
                        results[label] = scored["hybrid"]
        index.close()

    print(f"\nRetrieval evaluation, set '{set_name}': {len(questions)} questions over "
          f"{passages} passages (ingested in {ingest_s:.0f} s), packaged MiniLM, "
          "Postgres full text")  # fmt: skip
    print(table(results))
    if json_path:
        rows = [
            {"retrieval": label, "hit@1": s.hit_at_1, "hit@5": s.hit_at_5, "MRR@10": s.mrr_at_10}
            for label, s in results.items()
        ]
        json_path.write_text(
            json.dumps(
                {
                    "name": "retrieval",
                    "set": set_name,
                    "questions": len(questions),
                    "passages": passages,
                    "rows": rows,
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="stdlib")
    parser.add_argument("--sweep", action="store_true", help="also try other fusion settings")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    asyncio.run(main_async(args.set, args.sweep, args.json))


if __name__ == "__main__":
    main()
