"""Retrieval evaluation: run a labelled question set through SearchWorkflow, score each mode.

A set is two JSONL files under evals/sets/:
- `<name>-passages.jsonl`: {"id", "title", "text"}; each passage is ingested as one document,
  `<id>.txt`, through the real IngestWorkflow;
- `<name>-questions.jsonl`: {"id", "question", "relevant": [passage ids]}.

Metrics per retrieval mode (dense, keyword, hybrid): hit@1 (the top passage is a relevant one),
hit@5 and MRR@10. Everything runs on the real stack: the point is to measure, not to assume.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from durable_rag.client import RagClient
from schemas.search import RetrievalMode

log = logging.getLogger(__name__)

SETS = Path(__file__).resolve().parent / "sets"
# A degraded search is a timing accident (a retriever past its short timeout on a busy machine),
# not a ranking: it is asked again, a few times, before the evaluation gives up.
DEGRADED_TRIES = 3
MODES: tuple[RetrievalMode, ...] = ("dense", "keyword", "hybrid")


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    relevant: frozenset[str]


@dataclass(frozen=True)
class Scores:
    questions: int
    hit_at_1: float
    hit_at_5: float
    mrr_at_10: float


def load_questions(name: str) -> list[Question]:
    lines = (SETS / f"{name}-questions.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [Question(r["id"], r["question"], frozenset(r["relevant"])) for r in rows]


def write_corpus(name: str, folder: Path) -> int:
    """Write each passage of a set as `<id>.txt` in `folder`; returns how many."""
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    for line in (SETS / f"{name}-passages.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            passage = json.loads(line)
            (folder / f"{passage['id']}.txt").write_text(passage["text"], encoding="utf-8")
            count += 1
    return count


def passage_id(source: str) -> str:
    return Path(source).stem  # "os.path.join.txt" -> "os.path.join"


def score(ranked: Sequence[Sequence[str]], questions: Sequence[Question]) -> Scores:
    hit1 = hit5 = rr = 0.0
    for ids, q in zip(ranked, questions, strict=True):
        ranks = [i for i, pid in enumerate(ids[:10], start=1) if pid in q.relevant]
        if ranks:
            hit1 += ranks[0] == 1
            hit5 += ranks[0] <= 5
            rr += 1 / ranks[0]
    n = len(questions)
    return Scores(n, hit1 / n, hit5 / n, rr / n)


async def evaluate(
    rag: RagClient,
    questions: Sequence[Question],
    tenant: str,
    modes: Sequence[RetrievalMode] = MODES,
    concurrency: int = 4,
) -> dict[RetrievalMode, Scores]:
    """Search every question in every mode (top 10) and score the rankings."""
    limit = asyncio.Semaphore(concurrency)

    async def ranked(question: str, mode: RetrievalMode) -> list[str]:
        for attempt in range(1, DEGRADED_TRIES + 1):
            async with limit:
                found = await rag.search(question, tenant=tenant, top_k=10, mode=mode)
            if not found.degradations:
                return [passage_id(p.source) for p in found.passages]
            log.warning("search degraded in mode %s, try %d: %s", mode, attempt, found.degradations)
            await asyncio.sleep(0.5 * attempt)
        # Degraded every time: the ranking would measure the fallback, not the mode.
        raise RuntimeError(f"search degraded in mode {mode}: {found.degradations}")

    results: dict[RetrievalMode, Scores] = {}
    for mode in modes:
        rankings = await asyncio.gather(*(ranked(q.question, mode) for q in questions))
        results[mode] = score(rankings, questions)
    return results


def table(results: dict[str, Scores]) -> str:
    lines = [f"{'retrieval':<34} {'hit@1':>7} {'hit@5':>7} {'MRR@10':>7}"]
    for name, s in results.items():
        lines.append(f"{name:<34} {s.hit_at_1:>7.3f} {s.hit_at_5:>7.3f} {s.mrr_at_10:>7.3f}")
    return "\n".join(lines)
