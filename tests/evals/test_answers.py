"""The answer evaluation and its gate (R25): metrics, baselines, and the gate on the real flow.

`make test` runs the gate in two halves. Retrieval (test_answers_retrieval.py): the gate set (60
cases) through the real EvaluationWorkflow with a scripted engine. Generation (here): the 10-case
smoke set on vLLM SmolLM2 holds every gated metric. `make test-full` runs the 60 cases with
generation, as `make eval` does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.client import Client

from evals import answers
from ragkit import scoring
from ragkit.embedding import Embedder
from ragkit.llm.engine import VllmEngine
from schemas.evaluation import CaseOutcome, EvalCase, EvalMetrics
from tests.conftest import CORPUS, Database, copy_documents
from tests.evals.test_answers_retrieval import gate_and_regression
from tests.workflows.test_answer import answering


def case(id: str, relevant: list[str], facts: list[str], answerable: bool = True) -> EvalCase:
    return EvalCase(
        id=id,
        kind="functional",
        question="?",
        relevant=relevant,
        facts=facts,
        answerable=answerable,
    )


def outcome(
    id: str, retrieved: list[str], cited: list[str], answer: str, error: str = ""
) -> CaseOutcome:
    return CaseOutcome(
        case_id=id,
        kind="functional",
        trace_id=id,
        retrieved=retrieved,
        cited=cited,
        answer=answer,
        latency_ms=100.0,
        error=error,
    )


def test_the_smoke_set_is_well_formed_and_names_corpus_documents() -> None:
    cases = answers.load_set("answers-smoke")
    documents = {p.name for p in CORPUS.rglob("*") if p.is_file()}
    assert {c.kind for c in cases} == {"functional", "boundary", "regression"}
    assert any(not c.answerable for c in cases)
    assert all(set(c.relevant) <= documents for c in cases), "a case names a missing document"
    with pytest.raises(ValueError, match="no evaluation set 'nope'"):
        answers.load_set("nope")


def test_metrics_score_retrieval_citations_facts_and_refusals() -> None:
    cases = [
        case("a", ["x.md"], ["Thompson"]),
        case("b", ["y.md"], ["1666", "Pudding Lane"]),
        case("c", [], [], answerable=False),
        case("d", ["z.md"], ["never"]),
    ]
    outcomes = [
        outcome("a", ["x.md", "q.md"], ["x.md"], "Ken Thompson and Rob Pike [1]"),
        outcome("b", ["q.md", "y.md"], ["q.md", "y.md"], "It began in 1666 [2]"),
        outcome("c", ["q.md"], [], "I don't know."),
        outcome("d", [], [], "", error="boom"),
    ]
    m = scoring.metrics(cases, outcomes)
    assert (m.cases, m.errors) == (4, 1)
    assert m.recall_at_k == pytest.approx(2 / 3, abs=1e-4)
    assert m.mrr == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert m.ndcg_at_10 == pytest.approx((1 + 1 / 1.58496) / 3, abs=1e-3)
    assert m.citation_precision == pytest.approx((1 + 0.5) / 2, abs=1e-4)
    assert m.fact_coverage == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert m.refusal_accuracy == pytest.approx(
        3 / 4, abs=1e-4
    )  # a, b answered, c refused, d failed


def test_refusals_are_recognised() -> None:
    for text in [
        "I don't know.",
        "I do not know the answer",
        "The passages do not contain it",
        "I cannot answer that from the passages",
        "There is no information about it.",
    ]:
        assert scoring.refused(text), text
    assert not scoring.refused("Ken Thompson designed UTF-8 [1].")


def test_the_gate_fails_only_beyond_a_metrics_tolerance() -> None:
    base = EvalMetrics(
        cases=10,
        errors=0,
        recall_at_k=0.9,
        mrr=0.8,
        ndcg_at_10=0.85,
        citation_precision=0.7,
        fact_coverage=0.5,
        refusal_accuracy=0.8,
        latency_p50_ms=900,
        latency_p95_ms=2000,
    )
    tolerances = {metric: 0.05 for metric in answers.GATED} | {"fact_coverage": 0.25}
    baseline = {"metrics": base.model_dump(), "tolerances": tolerances}
    slightly = base.model_copy(update={"fact_coverage": 0.3, "latency_p95_ms": 9000})
    assert answers.compare(slightly, baseline) == []  # within tolerance; latency is not gated
    broken = base.model_copy(update={"recall_at_k": 0.5, "errors": 1})
    assert [r.metric for r in answers.compare(broken, baseline)] == ["recall_at_k", "errors"]


def outcomes_scoring(
    hits: list[bool], facts: list[bool]
) -> tuple[list[EvalCase], list[CaseOutcome]]:
    cases = [case(f"c{i}", [f"d{i}.md"], ["fact"]) for i in range(len(hits))]
    outcomes = [
        outcome(c.id, [f"d{i}.md"] if hit else ["other.md"], [], "the fact" if fact else "no")
        for i, (c, hit, fact) in enumerate(zip(cases, hits, facts, strict=True))
    ]
    return cases, outcomes


def test_bootstrap_tolerances_shrink_with_more_cases_and_keep_one_cases_worth() -> None:
    # Every case retrieved: the interval is empty, and one case's worth is left.
    cases, outcomes = outcomes_scoring([True] * 60, [True, False] * 30)
    tolerances = answers.bootstrap_tolerances(cases, outcomes)
    assert tolerances["recall_at_k"] == pytest.approx(1 / 60, abs=1e-4)
    # Half the facts found: about 1.645 standard errors of a proportion, sqrt(.25 / 60).
    assert tolerances["fact_coverage"] == pytest.approx(1.645 * (0.25 / 60) ** 0.5, abs=0.03)
    assert answers.bootstrap_tolerances(cases, outcomes) == tolerances  # seeded
    few = answers.bootstrap_tolerances(*outcomes_scoring([True] * 10, [True, False] * 5))
    assert few["fact_coverage"] > tolerances["fact_coverage"]
    # 59 of 60 retrieved, then 3 more missed: 5 points of recall, beyond its tolerance.
    hits = [True] * 59 + [False]
    cases, outcomes = outcomes_scoring(hits, [True] * 60)
    baseline = {
        "metrics": scoring.metrics(cases, outcomes).model_dump(),
        "tolerances": answers.bootstrap_tolerances(cases, outcomes),
    }
    worse = scoring.metrics(*outcomes_scoring([False] * 3 + hits[3:], [True] * 60))
    assert [r.metric for r in answers.compare(worse, baseline)] == [
        "recall_at_k",
        "mrr",
        "ndcg_at_10",
    ]


def test_the_gate_set_is_large_spread_and_names_corpus_documents() -> None:
    cases = answers.load_set("answers-gate")
    documents = {p.name for p in CORPUS.rglob("*") if p.is_file()}
    kinds = [c.kind for c in cases]
    assert len(cases) >= 50 and all(kinds.count(k) >= 5 for k in ("boundary", "regression"))
    assert all(set(c.relevant) <= documents for c in cases), "a case names a missing document"
    for c in cases:  # a fact the documents do not hold can never be found
        texts = [next(CORPUS.rglob(name)).read_text().lower() for name in c.relevant]
        assert not texts or all(any(f.lower() in t for t in texts) for f in c.facts), c.id
    baseline = answers.load_baseline("answers-gate")
    assert set(baseline["tolerances"]) == set(answers.GATED)
    assert baseline["tolerances"]["recall_at_k"] < 0.05  # a 5-point drop fails


@pytest.mark.integration
@pytest.mark.e2e
@pytest.mark.timeout(900)
async def test_the_generated_smoke_set_holds_its_baseline_on_the_real_engine(
    client: Client, database: Database, embedder: Embedder, engine: VllmEngine, tmp_path: Path
) -> None:
    """The gate's generated half on every change: the 10-case smoke set answered by vLLM
    (SmolLM2), every gated metric (citations, facts, refusals too) within its baseline's
    tolerance. The 60-case set with generation is `make test-full` / `make eval`."""
    cases = answers.load_set("answers-smoke")
    async with answering(client, database, embedder, engine, tmp_path / "data") as (_, rag, _m):
        relevant = {name for c in cases for name in c.relevant}
        folder = tmp_path / "smoke-corpus"
        copy_documents([str(next(CORPUS.rglob(n)).relative_to(CORPUS)) for n in relevant], folder)
        ingested = await rag.ingest([str(folder)], tenant="eval")
        assert not ingested.failures
        report = await rag.evaluate("answers-smoke", cases, "eval", concurrency=1)
        print("\n" + answers.markdown(report))
        if os.environ.get("DURABLE_RAG_SAVE_BASELINE") == "1":
            answers.save_baseline("answers-smoke", report, cases)
    regressions = answers.compare(report.metrics, answers.load_baseline("answers-smoke"))
    assert regressions == [], [str(r) for r in regressions]
    assert report.metrics.errors == 0 and report.metrics.cases == len(cases)


@pytest.mark.integration
@pytest.mark.e2e
@pytest.mark.full
@pytest.mark.timeout(1_500)  # 60 answers one at a time, then 60 short ones, on 2 CPUs
async def test_the_gate_holds_on_main_and_fails_on_a_five_point_retrieval_regression(
    client: Client, database: Database, embedder: Embedder, engine: VllmEngine, tmp_path: Path
) -> None:
    """`make test-full`: the gate set generated by the real engine holds every gated metric, and
    the deliberate regression fails it. (One case at a time: each generation runs alone, so the
    small model's text repeats.)"""
    cases = answers.load_set("answers-gate")
    async with answering(client, database, embedder, engine, tmp_path / "data") as (_, rag, _m):
        await gate_and_regression(client, rag, database, cases, answers.GATED, concurrency=1)
