"""Answer evaluation (R25): the case sets, their baselines and the gate.

The metrics themselves are ragkit/scoring.py (pure: `EvaluationWorkflow` computes them in
workflow code); here are the sets, the baselines and the gate that the CLI calls (`compare()`).
A set is `evals/sets/<name>.jsonl` (one `EvalCase` per line) over the bundled corpus; its baseline,
`evals/baselines/<name>.json`, holds the metrics of main and the tolerance of each: the gate fails
when a metric is worse than its baseline by more than its tolerance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.evaluation import EvalCase, EvalMetrics, EvalReport

SETS = Path(__file__).resolve().parent / "sets"
BASELINES = Path(__file__).resolve().parent / "baselines"
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
