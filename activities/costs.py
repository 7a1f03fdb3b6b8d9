"""Cost activities: what each answer cost, per step, kept in Postgres (R26). The reports over
those rows are ragkit/store/costs.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, aliased, sessionmaker
from temporalio import activity

from ragkit.db import (
    AnswerCostRow,
    CachedAnswer,
    Conversation,
    EvalReportRow,
    ShadowRun,
    Summary,
    TranscriptRow,
    Turn,
)
from ragkit.metrics import ANSWERS, ENGINE_SECONDS
from schemas.answer import RecordCostInput, RecordShadowInput
from schemas.documents import DocumentRef, ForgottenAnswers
from schemas.maintenance import CompactionInput, PurgeExpiredOutput, PurgeTranscriptsOutput

# What a conversation shows in place of a reply built on a document deleted since.
REDACTED_REPLY = "[removed: this reply drew on a document that has since been deleted]"


class CostActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @activity.defn
    def record_cost(self, request: RecordCostInput) -> None:
        """One row per answer (and its transcript, when it carries one); a retry overwrites the
        same rows. A row of another tenant is never overwritten (trace ids are the server's and
        hash the tenant in, so none should ever meet; this keeps it so)."""
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
            "read_documents": [str(d) for d in request.read_documents],
        }
        statement = insert(AnswerCostRow).values(trace_id=request.trace_id, **values)
        with self.sessions.begin() as session:
            session.execute(
                statement.on_conflict_do_update(
                    index_elements=["trace_id"],
                    set_=values,
                    where=AnswerCostRow.tenant == request.tenant,
                )
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
                    .on_conflict_do_update(
                        index_elements=["trace_id"],
                        set_=transcript,
                        where=TranscriptRow.tenant == request.tenant,
                    )
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
                .on_conflict_do_update(
                    index_elements=["live_trace_id"],
                    set_=values,
                    where=ShadowRun.tenant == request.tenant,
                )
            )

    @activity.defn
    def forget_document_answers(self, request: DocumentRef) -> ForgottenAnswers:
        """What answers that read a deleted document left in Postgres: their transcripts,
        answer cache entries and shadow rows are deleted, conversation replies built on it are
        redacted (the user's own turns stay) and the summaries folded from them deleted (the
        conversation folds its turns again). Their cost rows stay, for accounting: they
        hold ids and numbers, no text. Returns the answers, and the conversations whose replies
        this call redacted: their runs are deleted next. Idempotent."""
        with self.sessions.begin() as session:
            traces = sorted(
                session.scalars(
                    select(AnswerCostRow.trace_id).where(
                        AnswerCostRow.tenant == request.tenant,
                        AnswerCostRow.read_documents.has_key(str(request.document_id)),
                    )
                )
            )
            removed: dict[str, int] = {}
            for table, column in (
                (TranscriptRow, TranscriptRow.trace_id),
                (CachedAnswer, CachedAnswer.trace_id),
                (ShadowRun, ShadowRun.live_trace_id),
            ):
                result = session.execute(
                    delete(table).where(table.tenant == request.tenant, column.in_(traces))
                )
                removed[table.__tablename__] = int(result.rowcount or 0)  # type: ignore[attr-defined]
            # A rolling summary folded from a redacted reply may repeat it: the conversation
            # folds its turns again (from the oldest kept) without it.
            replies = (
                select(Turn.conversation_id, Turn.ordinal)
                .where(
                    Turn.trace_id.in_(traces),
                    Turn.role == "assistant",
                    Turn.conversation_id.in_(
                        select(Conversation.id).where(Conversation.tenant == request.tenant)
                    ),
                )
                .subquery()
            )
            summaries = session.execute(
                delete(Summary).where(
                    Summary.conversation_id == replies.c.conversation_id,
                    Summary.summarized_through >= replies.c.ordinal,
                )
            )
            removed[Summary.__tablename__] = int(summaries.rowcount or 0)  # type: ignore[attr-defined]
            redacted = session.execute(
                update(Turn)
                .where(
                    Turn.trace_id.in_(traces),
                    Turn.role == "assistant",
                    Turn.text != REDACTED_REPLY,
                    Turn.conversation_id.in_(
                        select(Conversation.id).where(Conversation.tenant == request.tenant)
                    ),
                )
                .values(text=REDACTED_REPLY, citations=[])
                .returning(Turn.conversation_id)
            ).all()
            conversations = session.scalars(
                select(Conversation.external_id).where(
                    Conversation.id.in_({row.conversation_id for row in redacted})
                )
            ).all()
        return ForgottenAnswers(
            answer_workflow_ids=traces,
            rows_removed=removed,
            turns_redacted=len(redacted),
            conversations=sorted(conversations),
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

    @activity.defn
    def purge_expired(self, request: CompactionInput) -> PurgeExpiredOutput:
        """Delete cost rows, shadow runs, cached answers and evaluation reports past their
        retention, `batch_size` rows per transaction so that a first run over years of rows
        holds no long lock, heartbeating between batches. The newest report of each case set
        and tenant stays whatever its age: the evaluation gate compares against it. So does the
        cost row of a conversation reply still stored."""
        # A conversation reply keeps its cost row as long as the reply is stored: forgetting a
        # deleted document finds the replies built on it through `read_documents`.
        reply_kept = select(Turn.id).where(Turn.trace_id == AnswerCostRow.trace_id).exists()
        later = aliased(EvalReportRow)
        newer_exists = (
            select(later.workflow_id)
            .where(
                later.set_name == EvalReportRow.set_name,
                later.tenant == EvalReportRow.tenant,
                later.created_at > EvalReportRow.created_at,
            )
            .exists()
        )
        tables: list[tuple[str, Any, Any, int, list[Any]]] = [
            ("answer_costs", AnswerCostRow.trace_id, AnswerCostRow.created_at,
             request.cost_retention_days, [~reply_kept]),
            ("shadow_runs", ShadowRun.live_trace_id, ShadowRun.created_at,
             request.shadow_retention_days, []),
            ("answer_cache", CachedAnswer.id, CachedAnswer.created_at,
             request.answer_cache_retention_days, []),
            ("eval_reports", EvalReportRow.workflow_id, EvalReportRow.created_at,
             request.eval_report_retention_days, [newer_exists]),
        ]  # fmt: skip
        removed: dict[str, int] = {}
        for name, key, created, days, also in tables:
            cutoff = func.now() - timedelta(days=days)
            removed[name] = 0
            while True:
                doomed = select(key).where(created < cutoff, *also).limit(request.batch_size)
                with self.sessions.begin() as session:
                    batch = len(
                        session.execute(
                            delete(key.class_).where(key.in_(doomed)).returning(key)
                        ).all()
                    )
                removed[name] += batch
                activity.heartbeat(name, removed[name])
                if batch < request.batch_size:
                    break
        return PurgeExpiredOutput(removed=removed)
