"""Retrieval quality on a labelled set: dense vs keyword vs hybrid, plus a fusion sweep.

    .venv/bin/python bench/retrieval.py [--sets stdlib,lexers] [--sweep] [--json FILE]
        [--chunk-tokens N]

Ingests the set's passages through IngestWorkflow into a fresh embedded stack (Postgres and the
Temporal dev server on free ports, the packaged MiniLM, Qdrant Edge with BM25 vectors), then runs
every question through SearchWorkflow in each mode, as before issue 18 (Postgres `ts_rank`,
z-scores) and with the defaults, and prints hit@1, hit@5 and MRR@10. The `(index)` and
`(workflow)` rows call the index as the live path does (BM25 alone; dense and BM25 fused in the
index by RRF or DBSF; or fused in workflow code by z-scores). `--sweep` adds more weights and
fusion parameters, to choose the settings from figures. `--chunk-tokens` ingests with another
chunk budget (default: the setting's, 512), to compare chunk sizes run against run.
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
from evals.retrieval import (  # noqa: E402
    Question,
    Scores,
    evaluate,
    load_questions,
    passage_id,
    score,
    table,
    write_corpus,
)
from ragkit.db import make_sessionmaker  # noqa: E402
from ragkit.embedding import load_embedder  # noqa: E402
from ragkit.index import IndexFilter, open_index  # noqa: E402
from ragkit.index.base import Fusion  # noqa: E402
from ragkit.index.factory import bm25_encoder  # noqa: E402
from ragkit.retrieval import FusionMethod, Scored, fuse  # noqa: E402
from ragkit.settings import PACKAGED_MINILM  # noqa: E402
from ragkit.temporal import connect  # noqa: E402

TENANT = "eval"


def index_rankings(
    index: Any, embedder: Any, settings: Any, questions: list[Question], tenant: str, sweep: bool
) -> dict[str, Scores]:
    """BM25 in the index, alone and fused with dense search, called on the index as the live
    path calls it (ragkit.index: search_keyword, search_fused), beside the same dense hits fused
    with BM25's by weighted z-scores in workflow code (ragkit.retrieval.fuse)."""
    bm25 = bm25_encoder(settings)
    where = IndexFilter(tenant)
    vectors = [embedder.embed_query(q.question) for q in questions]
    sparse = [bm25.query(q.question) for q in questions]
    candidates = settings.retrieval.candidates

    def passages(hits: list[Any]) -> list[str]:
        """Hits (or their sources) as passage ids, first occurrence only."""
        seen: list[str] = []
        for hit in hits:
            pid = passage_id(hit if isinstance(hit, str) else hit.payload.get("source", ""))
            if pid not in seen:
                seen.append(pid)
        return seen

    def scored(rank: Any) -> Scores:
        return score([passages(rank(i)) for i in range(len(questions))], questions)

    def zscore(
        i: int, dense_weight: float, method: FusionMethod = "zscore", least: float = 0.0
    ) -> list[str]:
        dense = index.search(vectors[i], candidates, where)
        keyword = index.search_keyword(sparse[i], candidates, where)
        source = {str(h.id): h.payload.get("source", "") for h in (*dense, *keyword)}
        fused = fuse(
            [Scored(str(h.id), h.score) for h in dense],
            [Scored(str(h.id), h.score) for h in keyword],
            method=method,
            dense_weight=dense_weight,
            keyword_weight=1 - dense_weight,
            dense_min_spread=least,
        )
        return [source[f.key] for f in fused[:10]]

    found = {
        "keyword BM25 (index)": scored(lambda i: index.search_keyword(sparse[i], 10, where)),
        "hybrid BM25, z-score 0.7/0.3 (workflow)": scored(lambda i: zscore(i, 0.7)),
    }
    fusions = [("rrf k=60", Fusion("rrf", 60)), ("dbsf", Fusion("dbsf"))]
    if sweep:
        fusions += [
            ("rrf k=60 0.7/0.3", Fusion("rrf", 60, (0.7, 0.3))),
            ("rrf k=60 0.3/0.7", Fusion("rrf", 60, (0.3, 0.7))),
            ("rrf k=20", Fusion("rrf", 20)),
        ]
        for weight in (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8):
            found[f"hybrid BM25, z-score {weight:g}/{1 - weight:g} (workflow)"] = scored(
                lambda i, w=weight: zscore(i, w)
            )
        for weight in (0.3, 0.4, 0.5):
            found[f"hybrid BM25, dbsf {weight:g}/{1 - weight:g} (workflow)"] = scored(
                lambda i, w=weight: zscore(i, w, "dbsf")
            )
        # The dense side's least spread (ragkit.retrieval.fuse), around the weights that win.
        for weight in (0.3, 0.35, 0.4, 0.45, 0.5):
            for least in (0.05, 0.08, 0.1, 0.12):
                found[
                    f"hybrid BM25, z-score {weight:g}/{1 - weight:g}, dense spread >= {least:g} "
                    "(workflow)"
                ] = scored(lambda i, w=weight, m=least: zscore(i, w, "zscore", m))
    for label, fusion in fusions:
        found[f"hybrid BM25, {label} (index)"] = scored(
            lambda i, f=fusion: index.search_fused(vectors[i], sparse[i], 10, candidates, where, f)
        )
    return found


async def main_async(
    set_names: list[str], sweep: bool, json_path: Path | None = None, chunk_tokens: int = 0
) -> None:
    """Every set on one stack (a tenant each), every mode, in one run."""
    figures: list[dict[str, Any]] = []
    counts: dict[str, tuple[int, int, float]] = {}
    overrides: dict[str, Any] = {"chunk_tokens": chunk_tokens} if chunk_tokens else {}
    async with bench_services("retrieval", **overrides) as (work, settings):
        embedder = load_embedder(PACKAGED_MINILM, "cpu", 512, settings.embedding.batch_size)
        index = open_index(settings, embedder.dimension)
        sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
        client = await connect(settings)
        with ThreadPoolExecutor(8) as executor:
            workers = [
                *local_workers(client, settings, sessions, index, embedder, executor),
            ]
            async with running(workers):
                for set_name in set_names:
                    tenant = f"{TENANT}-{set_name}"
                    passages = write_corpus(set_name, work / set_name)
                    questions = load_questions(set_name)
                    started = time.perf_counter()
                    rag = RagClient(client, settings)
                    ingested = await rag.ingest([str(work / set_name)], tenant)
                    assert not ingested.failures, ingested.failures
                    counts[set_name] = (len(questions), passages, time.perf_counter() - started)
                    results = await modes_of(client, settings, questions, tenant)
                    results |= index_rankings(index, embedder, settings, questions, tenant, sweep)
                    print(
                        f"\nset '{set_name}': {len(questions)} questions, {passages} passages, "
                        f"{index.count(tenant)} chunks of up to {settings.ingest.chunk_tokens} "
                        "tokens"
                    )
                    print(table(results))
                    figures += [
                        {"set": set_name, "retrieval": label, "hit@1": s.hit_at_1,
                         "hit@5": s.hit_at_5, "MRR@10": s.mrr_at_10}
                        for label, s in results.items()
                    ]  # fmt: skip
        index.close()
    if json_path:
        json_path.write_text(
            json.dumps(
                {
                    "name": "retrieval",
                    "sets": {
                        name: {"questions": q, "passages": p, "ingest_seconds": round(t, 1)}
                        for name, (q, p, t) in counts.items()
                    },
                    "rows": figures,
                }
            )
        )


async def modes_of(
    client: Any, settings: Any, questions: list[Question], tenant: str
) -> dict[str, Scores]:
    """Through SearchWorkflow: as before issue 18 (Postgres ts_rank, z-scores at 0.7/0.3), then
    the defaults, on the same index."""
    r = settings.retrieval
    before = settings.model_copy(
        update={
            "retrieval": r.model_copy(
                update={
                    "keyword": "ts_rank",
                    "fusion_method": "zscore",
                    "fusion_dense_weight": 0.7,
                    "fusion_keyword_weight": 0.3,
                    "fusion_dense_min_spread": 0.0,
                }
            )
        }
    )
    results: dict[str, Scores] = {}
    modes = await evaluate(
        RagClient(client, before), questions, tenant, modes=("keyword", "hybrid")
    )
    results["keyword ts_rank (Postgres; before)"] = modes["keyword"]
    results["hybrid ts_rank, z-score 0.7/0.3 (before)"] = modes["hybrid"]
    modes = await evaluate(RagClient(client, settings), questions, tenant)
    results["dense only"] = modes["dense"]
    results[f"keyword {r.keyword} (SearchWorkflow, default)"] = modes["keyword"]
    results[f"hybrid {r.keyword}, {r.fusion_method} (SearchWorkflow, default)"] = modes["hybrid"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="stdlib,lexers", help="comma-separated set names")
    parser.add_argument("--sweep", action="store_true", help="also try other fusion settings")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--chunk-tokens", type=int, default=0, help="chunk budget to ingest with (0: the setting)"
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    asyncio.run(main_async(names, args.sweep, args.json, args.chunk_tokens))


if __name__ == "__main__":
    main()
