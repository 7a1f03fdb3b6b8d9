"""Answer evaluation (R25): the case sets, their baselines and the gate.

The metrics themselves are ragkit/scoring.py (pure: `EvaluationWorkflow` computes them in
workflow code); here are the sets, the baselines and the gate that the CLI calls (`compare()`).
A set is `evals/sets/<name>.jsonl` (one `EvalCase` per line) over the bundled corpus; its baseline,
`evals/baselines/<name>.json`, holds the metrics of main and the tolerance of each: the gate fails
when a metric is worse than its baseline by more than its tolerance.

Tolerances come from the baseline run itself (`bootstrap_tolerances`): its cases are resampled with
replacement 2,000 times (a fixed seed), each metric is computed on every resample, and a metric's
tolerance is how far the 5th percentile of those values (a one-sided 95% bound: the gate only
looks for drops) lies below the baseline value; never less than one case's worth (1/cases), so a
metric every case scored alike still tolerates one case flipping. A drop within it is one the set cannot tell from the luck of which cases were
written; a drop beyond it is a regression the set can see. More cases, tighter tolerances: on
`answers-gate` (60 cases) a 5-point drop of recall@5 fails the gate.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragkit import scoring
from schemas.evaluation import CaseOutcome, EvalCase, EvalMetrics, EvalReport

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
# What retrieval alone decides: the gate's half that needs no generation (`make test` runs it on
# every change with a scripted engine; the generated half runs on the smoke set).
RETRIEVAL = ("recall_at_k", "mrr", "ndcg_at_10")


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


def compare(
    now: EvalMetrics, baseline: dict[str, dict[str, float]], metrics: Sequence[str] = GATED
) -> list[Regression]:
    """Each of `metrics` worse than its baseline by more than its tolerance; errors never pass."""
    found = []
    for metric in metrics:
        before = baseline["metrics"][metric]
        tolerance = baseline["tolerances"].get(metric, 0.0)
        value = getattr(now, metric)
        if value < before - tolerance - 1e-9:
            found.append(Regression(metric, before, value, tolerance))
    if now.errors > baseline["metrics"].get("errors", 0):
        found.append(Regression("errors", baseline["metrics"].get("errors", 0), now.errors, 0))
    return found


RESAMPLES = 2_000
CONFIDENCE = 0.95


def bootstrap_tolerances(
    cases: Sequence[EvalCase],
    outcomes: Sequence[CaseOutcome],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> dict[str, float]:
    """Per gated metric: baseline minus the one-sided lower bound of its percentile bootstrap
    over the cases, at least 1/len(cases). Deterministic for a given run (seeded)."""
    if not cases:
        raise ValueError("no cases to derive tolerances from")
    observed = scoring.metrics(cases, outcomes)
    draw = random.Random(seed)
    values: dict[str, list[float]] = {metric: [] for metric in GATED}
    for _ in range(resamples):
        sample = draw.choices(cases, k=len(cases))
        resampled = scoring.metrics(sample, outcomes)
        for metric in GATED:
            values[metric].append(getattr(resampled, metric))
    floor = 1 / len(cases)
    tolerances = {}
    for metric in GATED:
        ordered = sorted(values[metric])
        lower = ordered[int((1 - confidence) * resamples)]
        tolerances[metric] = round(max(floor, getattr(observed, metric) - lower), 4)
    return tolerances


def save_baseline(name: str, report: EvalReport, cases: Sequence[EvalCase]) -> Path:
    """The run's metrics as the set's baseline, with tolerances bootstrapped from its cases."""
    BASELINES.mkdir(exist_ok=True)
    path = BASELINES / f"{name}.json"
    baseline = {
        "metrics": report.metrics.model_dump(),
        "tolerances": bootstrap_tolerances(cases, report.outcomes),
        "tolerance_method": (
            f"percentile bootstrap over cases: {RESAMPLES} resamples, seed 0, "
            f"the one-sided {CONFIDENCE:.0%} bound's distance below the baseline, at least 1/cases"
        ),
        "run": report.workflow_id,
    }
    path.write_text(json.dumps(baseline, indent=2) + "\n")
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
