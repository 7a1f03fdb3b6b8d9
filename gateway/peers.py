"""How many gateways are live, so each admits its share of the latency bound
(ragkit/admission.py).

Each gateway records a heartbeat in Postgres every `gateway_heartbeat_seconds` and counts the
gateways seen within three of them. The first beat is taken before the gateway serves, so a new
gateway counts itself and every live peer from its first request; its peers see it at their
next beat. A gateway that stops cleanly removes its row; one that is killed stops counting three
heartbeats later, and until then its peers admit a smaller share than they could (the safe side).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gateway.streams import stop_task
from ragkit.admission import Admission
from ragkit.metrics import GATEWAY_PEERS
from ragkit.store import gateways

log = logging.getLogger("durable_rag.gateway")
# Heartbeats missed before a gateway no longer counts.
MISSED_BEATS = 3


class Peers:
    """Keeps `admission.gateways` current from the heartbeats (this module's docstring)."""

    def __init__(
        self, sessions: sessionmaker[Session], admission: Admission, every_seconds: float
    ) -> None:
        self.sessions, self.admission, self.every = sessions, admission, every_seconds
        self.id = f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._task: asyncio.Task[None] | None = None

    async def beat(self) -> None:
        """Record this gateway and count the live ones. When Postgres cannot be reached the
        last count stands: the gateways that can reach it keep counting this one."""
        try:
            live = await asyncio.to_thread(
                gateways.beat, self.sessions, self.id, self.every * MISSED_BEATS
            )
        except SQLAlchemyError as exc:
            log.warning("cannot record this gateway's heartbeat: %s", exc)
            return
        if live != self.admission.gateways:
            log.info("%d gateway(s) live: this one admits 1/%d of the latency bound", live, live)
        self.admission.gateways = live
        GATEWAY_PEERS.set(live)

    async def start(self) -> None:
        await self.beat()
        self._task = asyncio.create_task(self._run(), name="gateway-heartbeat")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None
        try:
            await asyncio.to_thread(gateways.leave, self.sessions, self.id)
        except SQLAlchemyError as exc:
            log.warning("cannot remove this gateway's heartbeat: %s", exc)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.beat()
