"""Reads of a stored conversation (Postgres is the record of turns and summaries, R16): the
whole history for the client and the gateway, and the latest summary for the history activities
(activities/history.py), which write them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ragkit import ids
from ragkit.db import Conversation, Summary, Turn
from ragkit.memory import render_summary
from schemas.answer import Citation
from schemas.conversation import ConversationHistory, ConversationKey, StoredTurn


def read_history(session: Session, key: ConversationKey) -> ConversationHistory | None:
    """The whole stored conversation, oldest turn first; None if there is none."""
    conversation = session.get(Conversation, ids.conversation_id(key.tenant, key.conversation_id))
    if conversation is None:
        return None
    summary = latest_summary(session, conversation.id)
    turns = session.scalars(
        select(Turn).where(Turn.conversation_id == conversation.id).order_by(Turn.ordinal)
    ).all()
    return ConversationHistory(
        tenant=key.tenant,
        conversation_id=key.conversation_id,
        title=conversation.title,
        summary=render_summary(summary.facts, summary.text) if summary else "",
        summarized_through=summary.summarized_through if summary else -1,
        turns=[
            StoredTurn(
                ordinal=t.ordinal,
                role=t.role,  # type: ignore[arg-type]
                text=t.text,
                citations=[Citation.model_validate(c) for c in t.citations],
                trace_id=t.trace_id,
                model=t.model,
                degradations=list(t.degradations),
                prompt_tokens=t.prompt_tokens,
                completion_tokens=t.completion_tokens,
                created_at=t.created_at,
            )
            for t in turns
        ],
    )


def latest_summary(session: Session, conversation: object) -> Summary | None:
    return session.scalars(
        select(Summary)
        .where(Summary.conversation_id == conversation)
        .order_by(Summary.summarized_through.desc())
        .limit(1)
    ).first()
