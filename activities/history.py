"""Conversation history activities: Postgres is the record of turns and summaries (R16, R17).

Writes are idempotent: a turn is keyed by (conversation, ordinal), so an activity retried after a
crash inserts nothing twice.
"""

from __future__ import annotations

import re

from sqlalchemy import delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from ragkit import ids
from ragkit.db import (
    AnswerCostRow,
    CachedAnswer,
    Conversation,
    FeedbackRow,
    ShadowRun,
    Summary,
    TranscriptRow,
    Turn,
)
from ragkit.store import history
from schemas.conversation import (
    AppendTurnInput,
    ConversationKey,
    ForgetConversationInput,
    ForgottenConversation,
    LoadedConversation,
    SaveSummaryInput,
    TurnMessage,
)

TITLE_CHARS = 80


class HistoryActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @activity.defn
    def load_conversation(self, key: ConversationKey) -> LoadedConversation:
        """The summary and the turns after it: what a prompt needs, not the whole history."""
        conversation_id = ids.conversation_id(key.tenant, key.conversation_id)
        with self.sessions() as session:
            if session.get(Conversation, conversation_id) is None:
                return LoadedConversation(exists=False)
            summary = history.latest_summary(session, conversation_id)
            through = summary.summarized_through if summary else -1
            turns = session.scalars(
                select(Turn)
                .where(Turn.conversation_id == conversation_id, Turn.ordinal > through)
                .order_by(Turn.ordinal)
            ).all()
            last = session.scalar(
                select(func.max(Turn.ordinal)).where(Turn.conversation_id == conversation_id)
            )
        return LoadedConversation(
            exists=True,
            summary=summary.text if summary else "",
            facts=list(summary.facts) if summary else [],
            summarized_through=through,
            turns=[
                TurnMessage(ordinal=t.ordinal, role=t.role, text=t.text)  # type: ignore[arg-type]
                for t in turns
            ],
            next_ordinal=(last + 1) if last is not None else 0,
        )

    @activity.defn
    def append_turn(self, request: AppendTurnInput) -> None:
        conversation_id = ids.conversation_id(request.tenant, request.conversation_id)
        with self.sessions.begin() as session:
            session.execute(
                insert(Conversation)
                .values(
                    id=conversation_id,
                    tenant=request.tenant,
                    external_id=request.conversation_id,
                    title=" ".join(request.text.split())[:TITLE_CHARS],
                )
                .on_conflict_do_update(index_elements=["id"], set_={"updated_at": func.now()})
            )
            session.execute(
                insert(Turn)
                .values(
                    conversation_id=conversation_id,
                    ordinal=request.ordinal,
                    role=request.role,
                    text=request.text,
                    message_id=request.message_id,
                    citations=[c.model_dump(mode="json") for c in request.citations],
                    prompt_tokens=request.prompt_tokens,
                    completion_tokens=request.completion_tokens,
                    trace_id=request.trace_id,
                    model=request.model,
                    degradations=request.degradations,
                )
                .on_conflict_do_nothing(constraint="uq_turns_conversation_ordinal")
            )

    @activity.defn
    def save_summary(self, request: SaveSummaryInput) -> None:
        conversation_id = ids.conversation_id(request.tenant, request.conversation_id)
        with self.sessions.begin() as session:
            latest = history.latest_summary(session, conversation_id)
            if latest is not None and latest.summarized_through >= request.summarized_through:
                return  # a retry, or an older fold: the newer summary stays
            session.add(
                Summary(
                    conversation_id=conversation_id,
                    text=request.summary,
                    facts=request.facts,
                    summarized_through=request.summarized_through,
                )
            )

    @activity.defn
    def delete_conversation(self, key: ConversationKey) -> int:
        """Delete the conversation with its turns and summaries; returns the turns removed."""
        conversation_id = ids.conversation_id(key.tenant, key.conversation_id)
        with self.sessions.begin() as session:
            turns = session.scalar(
                select(func.count())
                .select_from(Turn)
                .where(Turn.conversation_id == conversation_id)
            )
            session.execute(delete(Conversation).where(Conversation.id == conversation_id))
        return int(turns or 0)

    @activity.defn
    def forget_conversation(self, request: ForgetConversationInput) -> ForgottenConversation:
        """Delete the conversation, its turns and summaries, and what its turns' answers left in
        Postgres: their transcripts, cost rows, feedback, answer cache entries and shadow rows.
        Returns what the Temporal side must delete next (ForgetRunsWorkflow): the ordinals of the
        user turns (each started an answer) and the answers' trace ids. Idempotent."""
        key = request.key
        conversation_id = ids.conversation_id(key.tenant, key.conversation_id)
        # Exactly this conversation's answers (`<named>-<ordinal>`), not a longer id's.
        answers = f"^answer-{re.escape(request.answers_named)}-[0-9]+$"
        with self.sessions.begin() as session:
            turns = session.execute(
                select(Turn.ordinal, Turn.role, Turn.trace_id).where(
                    Turn.conversation_id == conversation_id
                )
            ).all()
            traces = sorted({t.trace_id for t in turns if t.trace_id})
            removed: dict[str, int] = {}
            for table, column in (
                (TranscriptRow, TranscriptRow.trace_id),
                (AnswerCostRow, AnswerCostRow.trace_id),
                (FeedbackRow, FeedbackRow.trace_id),
                (CachedAnswer, CachedAnswer.trace_id),
                (ShadowRun, ShadowRun.live_trace_id),
            ):
                result = session.execute(
                    delete(table).where(
                        table.tenant == key.tenant,
                        or_(column.in_(traces), column.regexp_match(answers)),
                    )
                )
                removed[table.__tablename__] = int(result.rowcount or 0)  # type: ignore[attr-defined]
            session.execute(delete(Conversation).where(Conversation.id == conversation_id))
        return ForgottenConversation(
            turns_removed=len(turns),
            user_ordinals=sorted(t.ordinal for t in turns if t.role == "user"),
            answer_trace_ids=traces,
            rows_removed=removed,
        )
