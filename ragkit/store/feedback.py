"""User feedback: thumbs up or down per answer, by trace id (R21's business metrics).

An answer can be rated once it has its cost row (every answer writes one); the latest vote
counts. A vote on a trace id the tenant never received is refused, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import AnswerCostRow, FeedbackRow
from ragkit.metrics import FEEDBACK

RATINGS = ("up", "down")


class UnknownAnswer(LookupError):
    """No answer with this trace id for this tenant."""


def record(
    sessions: sessionmaker[Session], tenant: str, trace_id: str, rating: str, comment: str = ""
) -> bool:
    """Store the vote; True when it replaced an earlier one."""
    if rating not in RATINGS:
        raise ValueError(f"rating must be one of {', '.join(RATINGS)}, not {rating!r}")
    with sessions.begin() as session:
        answer = session.get(AnswerCostRow, trace_id)
        if answer is None or answer.tenant != tenant:
            raise UnknownAnswer(f"no answer with trace id {trace_id!r}")
        replaced = session.get(FeedbackRow, trace_id) is not None
        values = {"tenant": tenant, "rating": rating, "comment": comment, "created_at": func.now()}
        session.execute(
            insert(FeedbackRow)
            .values(trace_id=trace_id, **values)
            .on_conflict_do_update(index_elements=["trace_id"], set_=values)
        )
    FEEDBACK.labels(rating).inc()
    return replaced


@dataclass(frozen=True)
class Tally:
    up: int
    down: int

    @property
    def approval(self) -> float | None:
        total = self.up + self.down
        return self.up / total if total else None


def tally(session: Session, since: datetime, tenant: str | None = None) -> Tally:
    query = select(FeedbackRow.rating, func.count()).where(FeedbackRow.created_at >= since)
    if tenant is not None:
        query = query.where(FeedbackRow.tenant == tenant)
    counts = dict(session.execute(query.group_by(FeedbackRow.rating)).tuples().all())
    return Tally(up=counts.get("up", 0), down=counts.get("down", 0))
