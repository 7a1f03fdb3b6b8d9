"""What each LLM worker serves. A worker announces its model's context length when it starts;
clients budget a prompt from the lengths of the models that may answer it, so a gateway needs no
copy of each worker's `max_model_len` (compose runs them with different settings)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import ServedModel


def announce(sessions: sessionmaker[Session], model: str, max_model_len: int) -> None:
    """Record that `model` is served with a context of `max_model_len` tokens. The last worker
    to start wins: workers of one model are expected to share their settings."""
    values = {"max_model_len": max_model_len, "updated_at": func.now()}
    with sessions.begin() as session:
        session.execute(
            insert(ServedModel)
            .values(model=model, **values)
            .on_conflict_do_update(index_elements=["model"], set_=values)
        )


def context_lengths(sessions: sessionmaker[Session]) -> dict[str, int]:
    """Every announced model's context length."""
    with sessions() as session:
        rows = session.execute(select(ServedModel.model, ServedModel.max_model_len))
        return {model: length for model, length in rows}
