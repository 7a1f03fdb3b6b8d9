"""The answer gate's retrieval half (R25), on every change: the gate set (60 cases) through the
real EvaluationWorkflow and AnswerWorkflow (Temporal, Postgres, Qdrant Edge, MiniLM) with a
scripted engine must hold its baseline's recall@5, MRR and nDCG@10, and with a deliberate
retrieval regression of 5 points of recall@5 it must not. Its generated half is test_answers.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from evals import answers
from ragkit import ids
from ragkit.embedding import Embedder
from schemas.evaluation import EvalCase
from tests.conftest import CORPUS, Database
from tests.engines import ScriptedEngine
from tests.workflows.test_answer import answering
from tests.workflows.test_ingest import save_history


def lonely_cases(cases: list[EvalCase]) -> list[EvalCase]:
    """Three cases whose one relevant document no other case names: deleting those documents
    drops recall@5 by exactly 3/60 = 5 points."""
    named = [name for c in cases for name in c.relevant]
    lonely = [c for c in cases if len(c.relevant) == 1 and named.count(c.relevant[0]) == 1][:3]
    assert len(lonely) == 3, "the gate set needs three cases with a document of their own"
    return lonely


async def gate_and_regression(
    client: Client,
    rag: Any,
    database: Database,
    cases: list[EvalCase],
    metrics: tuple[str, ...],
    concurrency: int,
) -> None:
    """The gate set holds its baseline on `metrics`; with the lonely cases' documents deleted,
    recall@5 drops by 5 points and the gate fails on it."""
    lonely = lonely_cases(cases)
    missing = {c.relevant[0] for c in lonely}
    ingested = await rag.ingest([str(CORPUS)], tenant="eval")
    assert not ingested.failures
    report = await rag.evaluate("answers-gate", cases, "eval", concurrency=concurrency)
    await save_history(client, report.workflow_id, "evaluation")
    print("\n" + answers.markdown(report))
    if os.environ.get("DURABLE_RAG_SAVE_BASELINE") == "1" and metrics == answers.GATED:
        answers.save_baseline("answers-gate", report, cases)
    for path in CORPUS.rglob("*"):
        if path.name in missing:
            await rag.delete_document(ids.document_id("eval", str(path.resolve())), "eval")
    worse = await rag.evaluate("answers-gate", cases, "eval", concurrency=4, max_answer_tokens=1)

    assert report.metrics.errors == 0, report.outcomes
    baseline = answers.load_baseline("answers-gate")
    regressions = answers.compare(report.metrics, baseline, metrics)
    assert regressions == [], [str(r) for r in regressions]
    retrieved = {o.case_id: o.retrieved for o in report.outcomes}
    assert all(c.relevant[0] in retrieved[c.id] for c in lonely), "baseline misses them"
    drop = report.metrics.recall_at_k - worse.metrics.recall_at_k
    assert drop >= 0.05 - 1e-9, (report.metrics.recall_at_k, worse.metrics.recall_at_k)
    failed = {r.metric for r in answers.compare(worse.metrics, baseline, metrics)}
    assert "recall_at_k" in failed, (failed, worse.metrics)
    stored = database.rows(
        "SELECT set_name, metrics->>'recall_at_k' FROM eval_reports WHERE workflow_id = %s",
        report.workflow_id,
    )
    assert stored == [("answers-gate", str(report.metrics.recall_at_k))]
    assert len(report.outcomes) == len(cases)


@pytest.mark.integration
@pytest.mark.timeout(900)
async def test_the_gates_retrieval_half_holds_on_main_and_fails_on_a_five_point_regression(
    client: Client, database: Database, embedder: Embedder, tmp_path: Path
) -> None:
    """The 60-case gate set through the real EvaluationWorkflow and AnswerWorkflow, every case
    answered by the scripted engine: what it gates (recall@5, MRR, nDCG@10) is decided before
    generation, so it needs no model. This runs on every change; the generated half is below."""
    cases = answers.load_set("answers-gate")
    engine = ScriptedEngine()
    async with answering(client, database, embedder, engine, tmp_path / "data") as (_, rag, _m):
        await gate_and_regression(client, rag, database, cases, answers.RETRIEVAL, concurrency=4)
    assert len(engine.requests) >= len(cases)  # generation ran in the real activity
