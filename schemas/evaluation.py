"""Contracts of the evaluation flow (R25): cases, outcomes, metrics and the report."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.answer import AnswerPlan
from schemas.common import Body, Contract, TenantId

CaseKind = Literal["functional", "boundary", "regression"]


class EvalCase(Body):
    """One case as an eval set file spells it: an unknown key is an error, not a skipped check."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    kind: CaseKind
    question: str = Field(min_length=1, max_length=8_000)
    relevant: list[str] = Field(
        default_factory=list, description="Document file names retrieval must find."
    )
    facts: list[str] = Field(
        default_factory=list, description="Texts the answer must contain (any case)."
    )
    answerable: bool = Field(
        default=True, description="False: the right answer is to say it does not know."
    )


class EvalInput(Contract):
    set_name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    tenant: TenantId
    cases: list[EvalCase] = Field(min_length=1, max_length=10_000)
    plan: AnswerPlan
    top_k: int = Field(default=5, ge=1, le=20)
    max_answer_tokens: int = Field(default=64, ge=1, le=4_096)
    concurrency: int = Field(default=4, ge=1, le=64)


class CaseOutcome(Contract):
    case_id: str
    kind: CaseKind
    trace_id: str
    retrieved: list[str] = Field(description="Documents of the context, best first, no repeats.")
    cited: list[str] = Field(description="Documents the answer cites.")
    answer: str
    latency_ms: float
    error: str = ""


class EvalMetrics(Contract):
    cases: int
    errors: int
    recall_at_k: float
    mrr: float
    ndcg_at_10: float
    citation_precision: float
    fact_coverage: float
    refusal_accuracy: float
    latency_p50_ms: float
    latency_p95_ms: float


class EvalReport(Contract):
    workflow_id: str
    set_name: str
    metrics: EvalMetrics
    outcomes: list[CaseOutcome]


class StoreEvalInput(Contract):
    report: EvalReport
    tenant: TenantId | None = None  # None: a run recorded before reports kept it
