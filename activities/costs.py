"""Cost activities and reports: what each answer cost, per step, kept in Postgres (R26)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

from sqlalchemy import Date, cast, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from durable_rag.db import AnswerCostRow, ShadowRun, TranscriptRow
from durable_rag.metrics import ANSWERS, ENGINE_SECONDS
from schemas.answer import RecordCostInput, RecordShadowInput
from schemas.maintenance import CompactionInput, PurgeTranscriptsOutput


class CostActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @activity.defn
    def record_cost(self, request: RecordCostInput) -> None:
        """One row per answer (and its transcript, when it carries one); a retry overwrites the
        same rows."""
        cost = request.cost
        tokens_in = sum(s.prompt_tokens for s in cost.steps)
        tokens_out = sum(s.completion_tokens for s in cost.steps)
        values = {
            "tenant": request.tenant,
            "model": request.model or "-",
            "route": request.route,
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "engine_seconds": cost.engine_seconds,
            "embed_seconds": cost.embed_seconds,
            "total_ms": request.total_ms,
            "steps": [s.model_dump() for s in cost.steps],
            "cited_chunks": [str(c) for c in request.cited_chunks],
        }
        statement = insert(AnswerCostRow).values(trace_id=request.trace_id, **values)
        with self.sessions.begin() as session:
            session.execute(
                statement.on_conflict_do_update(index_elements=["trace_id"], set_=values)
            )
            if request.messages:
                transcript = {
                    "tenant": request.tenant,
                    "model": request.model or "-",
                    "messages": [m.model_dump() for m in request.messages],
                    "output": request.output,
                }
                session.execute(
                    insert(TranscriptRow)
                    .values(trace_id=request.trace_id, **transcript)
                    .on_conflict_do_update(index_elements=["trace_id"], set_=transcript)
                )
        # Once per answer (a retry after this point is rare and only over-counts by one).
        ANSWERS.labels(request.route, str(request.degraded).lower()).inc()
        for step in cost.steps:
            ENGINE_SECONDS.labels(step.model, step.step).inc(step.seconds)

    @activity.defn
    def record_shadow(self, request: RecordShadowInput) -> None:
        """The candidate's answer beside the live one; a retry overwrites the same row."""
        values = request.model_dump(exclude={"live_trace_id"}) | {
            "cited_chunks": [str(c) for c in request.cited_chunks]
        }
        with self.sessions.begin() as session:
            session.execute(
                insert(ShadowRun)
                .values(live_trace_id=request.live_trace_id, **values)
                .on_conflict_do_update(index_elements=["live_trace_id"], set_=values)
            )

    @activity.defn
    def purge_transcripts(self, request: CompactionInput) -> PurgeTranscriptsOutput:
        """Delete transcripts past their retention."""
        cutoff = func.now() - timedelta(days=request.transcript_retention_days)
        with self.sessions.begin() as session:
            removed = session.execute(
                delete(TranscriptRow)
                .where(TranscriptRow.created_at < cutoff)
                .returning(TranscriptRow.trace_id)
            ).all()
        return PurgeTranscriptsOutput(removed=len(removed))


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
    from datetime import UTC

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


def shadow_report(session: Session, since: datetime) -> list[ShadowComparison]:
    rows = session.execute(
        select(ShadowRun, AnswerCostRow, TranscriptRow.output)
        .join(AnswerCostRow, AnswerCostRow.trace_id == ShadowRun.live_trace_id)
        .outerjoin(TranscriptRow, TranscriptRow.trace_id == ShadowRun.live_trace_id)
        .where(ShadowRun.created_at >= since)
    ).all()
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
