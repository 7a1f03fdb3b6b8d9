"""The model alias (R13): which served model answers by default. The alias `default` names the
model new answers go to; clients read it at most every half second, and a swap
(durable_rag/model_swap.py) switches it in one committed row."""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import ModelAlias

DEFAULT = "default"


def active(sessions: sessionmaker[Session], fallback: str, alias: str = DEFAULT) -> str:
    """The model `alias` names, or `fallback` (the settings' model) before any swap."""
    with sessions() as session:
        row = session.get(ModelAlias, alias)
        return row.model if row is not None else fallback


def activate(
    sessions: sessionmaker[Session], model: str, fallback: str, alias: str = DEFAULT
) -> str:
    """Point `alias` at `model` in one transaction; returns the model it named before."""
    with sessions.begin() as session:
        row = session.get(ModelAlias, alias, with_for_update=True)
        previous = row.model if row is not None else fallback
        values = {"model": model, "previous": previous, "updated_at": func.now()}
        session.execute(
            insert(ModelAlias)
            .values(alias=alias, **values)
            .on_conflict_do_update(index_elements=["alias"], set_=values)
        )
    return previous
