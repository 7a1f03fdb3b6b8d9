"""Answer evaluation (R25): the metrics of a run over a case set, baselines and the gate.

Pure: `EvaluationWorkflow` calls `metrics()` in workflow code, the CLI calls `compare()`.
A set is `evals/sets/<name>.jsonl` (one `EvalCase` per line) over the bundled corpus; its baseline,
`evals/baselines/<name>.json`, holds the metrics of main and the tolerance of each: the gate fails
when a metric is worse than its baseline by more than its tolerance.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.evaluation import CaseOutcome, EvalCase, EvalMetrics, EvalReport

SETS = Path(__file__).resolve().parent / "sets"
BASELINES = Path(__file__).resolve().parent / "baselines"
# An answer that says it cannot answer. The prompt asks for "don't know" in those words.
REFUSAL = re.compile(
    r"\b(i\s+)?(do\s*n[o']?t|cannot|can't|could\s*n[o']?t)\s+(know|find|answer|tell|say)|"
    r"\bnot\s+(mentioned|provided|in the passages|contain)|\bno information\b",
    re.IGNORECASE,
)
# Higher is better for these; latency is reported, not gated (it belongs to benchmarks).
GATED = (
    "recall_at_k",
    "mrr",
    "ndcg_at_10",
    "citation_precision",
    "fact_coverage",
    "refusal_accuracy",
)


def load_set(name: str) -> list[EvalCase]:
    path = SETS / f"{name}.jsonl"
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", name) or not path.is_file():
        available = sorted(p.stem for p in SETS.glob("*.jsonl") if not p.stem.startswith("stdlib"))
        raise ValueError(f"no evaluation set {name!r}; available: {', '.join(available)}")
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                cases.append(EvalCase.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"{path.name}, line {number}: {exc}") from exc
    if len({c.id for c in cases}) != len(cases):
        raise ValueError(f"{path.name}: case ids repeat")
    return cases


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


@dataclass(frozen=True)
class Regression:
    metric: str
    baseline: float
    now: float
    tolerance: float

    def __str__(self) -> str:
        return (
            f"{self.metric}: {self.now:.3f}, baseline {self.baseline:.3f} "
            f"(tolerance {self.tolerance:.3f})"
        )


def load_baseline(name: str) -> dict[str, dict[str, float]]:
    path = BASELINES / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"no baseline for {name!r}: run `durable-rag eval {name} --save-baseline`")
    data: dict[str, dict[str, float]] = json.loads(path.read_text())
    return data


def compare(now: EvalMetrics, baseline: dict[str, dict[str, float]]) -> list[Regression]:
    """Each gated metric worse than its baseline by more than its tolerance; errors never pass."""
    found = []
    for metric in GATED:
        before = baseline["metrics"][metric]
        tolerance = baseline["tolerances"].get(metric, 0.0)
        value = getattr(now, metric)
        if value < before - tolerance - 1e-9:
            found.append(Regression(metric, before, value, tolerance))
    if now.errors > baseline["metrics"].get("errors", 0):
        found.append(Regression("errors", baseline["metrics"].get("errors", 0), now.errors, 0))
    return found


DEFAULT_TOLERANCES = {
    "recall_at_k": 0.05,
    "mrr": 0.1,
    "ndcg_at_10": 0.1,
    # A small model's wording shifts with batching and threads: two cases' worth of slack.
    "citation_precision": 0.25,
    "fact_coverage": 0.25,
    "refusal_accuracy": 0.2,
}


def save_baseline(name: str, now: EvalMetrics) -> Path:
    BASELINES.mkdir(exist_ok=True)
    path = BASELINES / f"{name}.json"
    kept = json.loads(path.read_text())["tolerances"] if path.is_file() else DEFAULT_TOLERANCES
    path.write_text(json.dumps({"metrics": now.model_dump(), "tolerances": kept}, indent=2) + "\n")
    return path


def markdown(report: EvalReport, regressions: Sequence[Regression] | None = None) -> str:
    m = report.metrics
    lines = [
        f"# Evaluation of `{report.set_name}` ({report.workflow_id})",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in m.model_dump().items()),
        "",
    ]
    if regressions is not None:
        lines += ["## Gate", ""]
        lines += [f"- FAIL {r}" for r in regressions] or ["- pass: no metric beyond tolerance"]
        lines.append("")
    lines += [
        "## Cases",
        "",
        "| case | kind | retrieved | cited | answer | error |",
        "|---|---|---|---|---|---|",
    ]
    for o in report.outcomes:
        answer = o.answer.replace("|", "\\|").replace("\n", " ")[:120]
        lines.append(
            f"| {o.case_id} | {o.kind} | {', '.join(o.retrieved)} | {', '.join(o.cited)} | "
            f"{answer} | {o.error} |"
        )
    return "\n".join(lines) + "\n"
