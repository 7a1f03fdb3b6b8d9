"""Reports over the cost rows (R26) and the shadow runs (R28): what `durable-rag costs top` and
`durable-rag shadow report` print. The rows are written by activities/costs.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from statistics import median

from sqlalchemy import Date, cast, func, select
from sqlalchemy.orm import Session

from ragkit.db import AnswerCostRow, ShadowRun, TranscriptRow


@dataclass(frozen=True)
class Total:
    key: str
    answers: int
    engine_seconds: float
    prompt_tokens: int
    completion_tokens: int


def top(session: Session, limit: int, since: datetime) -> list[AnswerCostRow]:
    """The most expensive answers since `since`, by engine seconds."""
    return list(
        session.scalars(
            select(AnswerCostRow)
            .where(AnswerCostRow.created_at >= since)
            .order_by(AnswerCostRow.engine_seconds.desc(), AnswerCostRow.trace_id)
            .limit(limit)
        )
    )


def totals(session: Session, by: str, since: datetime) -> list[Total]:
    """Sums per model, tenant or day since `since`, most expensive first."""
    column = {
        "model": AnswerCostRow.model,
        "tenant": AnswerCostRow.tenant,
        "day": cast(AnswerCostRow.created_at, Date),
    }[by]
    rows = session.execute(
        select(
            column,
            func.count(),
            func.sum(AnswerCostRow.engine_seconds),
            func.sum(AnswerCostRow.prompt_tokens),
            func.sum(AnswerCostRow.completion_tokens),
        )
        .where(AnswerCostRow.created_at >= since)
        .group_by(column)
        .order_by(func.sum(AnswerCostRow.engine_seconds).desc())
    ).all()
    return [
        Total(str(k), int(n), float(s or 0), int(i or 0), int(o or 0)) for k, n, s, i, o in rows
    ]


def since_days(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


@dataclass(frozen=True)
class ShadowComparison:
    """Candidate against live over the pairs since a moment, per candidate model and prompt."""

    candidate: str
    pairs: int
    agreement: float  # share of pairs whose answers agree (word overlap >= AGREE)
    answer_similarity: float  # mean word overlap (Jaccard) of the two answers
    citation_overlap: float  # mean Jaccard of the cited chunks (1 when both cite nothing)
    live_p50_ms: float
    candidate_p50_ms: float
    live_engine_seconds: float  # mean per answer
    candidate_engine_seconds: float


AGREE = 0.5
_WORDS = re.compile(r"[a-z0-9]+")


def jaccard(a: set[str], b: set[str]) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def shadow_report(
    session: Session, since: datetime, tenant: str | None = None
) -> list[ShadowComparison]:
    """Candidate against live, per candidate; `tenant` keeps one tenant's pairs only (a shadow
    run carries its live request's tenant, and the live row must be that tenant's too)."""
    query = (
        select(ShadowRun, AnswerCostRow, TranscriptRow.output)
        .join(AnswerCostRow, AnswerCostRow.trace_id == ShadowRun.live_trace_id)
        .outerjoin(TranscriptRow, TranscriptRow.trace_id == ShadowRun.live_trace_id)
        .where(ShadowRun.created_at >= since)
    )
    if tenant is not None:
        query = query.where(ShadowRun.tenant == tenant, AnswerCostRow.tenant == tenant)
    rows = session.execute(query).all()
    groups: dict[str, list[tuple[ShadowRun, AnswerCostRow, str | None]]] = {}
    for shadow, live, output in rows:
        groups.setdefault(f"{shadow.model} / {shadow.prompt_id} / {shadow.retrieval}", []).append(
            (shadow, live, output)
        )
    report = []
    for candidate, pairs in sorted(groups.items()):
        similarities = [
            jaccard(set(_WORDS.findall(s.answer.lower())), set(_WORDS.findall(o.lower())))
            for s, _, o in pairs
            if o is not None
        ]
        report.append(
            ShadowComparison(
                candidate=candidate,
                pairs=len(pairs),
                agreement=sum(x >= AGREE for x in similarities) / len(similarities)
                if similarities
                else 0.0,
                answer_similarity=sum(similarities) / len(similarities) if similarities else 0.0,
                citation_overlap=sum(
                    jaccard(set(s.cited_chunks), set(live.cited_chunks)) for s, live, _ in pairs
                )
                / len(pairs),
                live_p50_ms=median([live.total_ms for _, live, _ in pairs]),
                candidate_p50_ms=median([s.total_ms for s, _, _ in pairs]),
                live_engine_seconds=sum(live.engine_seconds for _, live, _ in pairs) / len(pairs),
                candidate_engine_seconds=sum(s.engine_seconds for s, _, _ in pairs) / len(pairs),
            )
        )
    return report
