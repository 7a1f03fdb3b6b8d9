"""Live gateways, by heartbeat: how many share the admission bound (ragkit/admission.py).

Every time is Postgres's own `now()`, so the gateways' clocks need not agree.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from ragkit.db import GatewayRow

# A row this old is a gateway long gone (killed, so it never left): removed on the next beat.
FORGET_SECONDS = 3_600


def beat(sessions: sessionmaker[Session], gateway_id: str, live_seconds: float) -> int:
    """Record that `gateway_id` is live now; how many gateways were seen within
    `live_seconds` (this one included)."""
    window = text("make_interval(secs => :secs)").bindparams(secs=live_seconds)
    forget = text("make_interval(secs => :forget)").bindparams(forget=FORGET_SECONDS)
    with sessions.begin() as session:
        session.execute(
            insert(GatewayRow)
            .values(id=gateway_id)
            .on_conflict_do_update(index_elements=["id"], set_={"seen_at": func.now()})
        )
        session.execute(delete(GatewayRow).where(GatewayRow.seen_at < func.now() - forget))
        live = session.scalar(
            select(func.count())
            .select_from(GatewayRow)
            .where(GatewayRow.seen_at >= func.now() - window)
        )
    return max(1, int(live or 0))


def leave(sessions: sessionmaker[Session], gateway_id: str) -> None:
    """A gateway that stops cleanly stops counting at once."""
    with sessions.begin() as session:
        session.execute(delete(GatewayRow).where(GatewayRow.id == gateway_id))
