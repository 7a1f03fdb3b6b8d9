"""Cost activities and reports: what each answer cost, per step, kept in Postgres (R26)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Date, cast, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from durable_rag.db import AnswerCostRow, TranscriptRow
from durable_rag.metrics import ANSWERS, ENGINE_SECONDS
from schemas.answer import RecordCostInput
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
