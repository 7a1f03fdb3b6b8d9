"""The scores of an evaluation run (R25): retrieval, citations, facts, refusals and latency over
a case set. Pure: `EvaluationWorkflow` computes them in workflow code; the sets, baselines and
the gate are evals/answers.py."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from schemas.evaluation import CaseOutcome, EvalCase, EvalMetrics

# An answer that says it cannot answer. The prompt asks for "don't know" in those words.
REFUSAL = re.compile(
    r"\b(i\s+)?(do\s*n[o']?t|cannot|can't|could\s*n[o']?t)\s+(know|find|answer|tell|say)|"
    r"\bnot\s+(mentioned|provided|in the passages|contain)|\bno information\b",
    re.IGNORECASE,
)


def refused(answer: str) -> bool:
    return bool(REFUSAL.search(answer))


def _percentile(values: Sequence[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def metrics(cases: Sequence[EvalCase], outcomes: Sequence[CaseOutcome]) -> EvalMetrics:
    """Retrieval (recall@k, MRR, nDCG@10 over cases with relevant documents), citation precision
    (cited documents that are relevant), fact coverage (facts found in the answer), refusal
    accuracy (unanswerable cases refused, answerable ones not), latency percentiles. A failed case
    scores zero everywhere."""
    by_id = {o.case_id: o for o in outcomes}
    recall, rr, ndcg, precision, coverage, refusals = [], [], [], [], [], []
    for case in cases:
        outcome = by_id[case.id]
        failed = bool(outcome.error)
        relevant = set(case.relevant)
        if relevant:
            ranks = [i for i, doc in enumerate(outcome.retrieved, start=1) if doc in relevant]
            recall.append(0.0 if failed else len(set(outcome.retrieved) & relevant) / len(relevant))
            rr.append(0.0 if failed or not ranks else 1 / ranks[0])
            dcg = sum(1 / math.log2(r + 1) for r in ranks if r <= 10)
            ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(relevant), 10) + 1))
            ndcg.append(0.0 if failed else dcg / ideal)
            if outcome.cited and case.answerable:
                precision.append(
                    0.0
                    if failed
                    else sum(d in relevant for d in outcome.cited) / len(outcome.cited)
                )
        if case.facts:
            found = [f.lower() in outcome.answer.lower() for f in case.facts]
            coverage.append(0.0 if failed else sum(found) / len(found))
        refusals.append(0.0 if failed else float(refused(outcome.answer) != case.answerable))
    latencies = [o.latency_ms for o in outcomes if not o.error]
    return EvalMetrics(
        cases=len(cases),
        errors=sum(1 for o in outcomes if o.error),
        recall_at_k=round(_mean(recall), 4),
        mrr=round(_mean(rr), 4),
        ndcg_at_10=round(_mean(ndcg), 4),
        citation_precision=round(_mean(precision), 4),
        fact_coverage=round(_mean(coverage), 4),
        refusal_accuracy=round(_mean(refusals), 4),
        latency_p50_ms=round(_percentile(latencies, 0.5), 1),
        latency_p95_ms=round(_percentile(latencies, 0.95), 1),
    )
