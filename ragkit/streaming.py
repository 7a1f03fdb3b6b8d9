"""Token streaming from the LLM workers to the gateway over Postgres LISTEN/NOTIFY (R5).

No new broker: Postgres is already in the stack. A generation with a `stream_id` publishes its
text as it grows on one channel; each gateway process holds one LISTEN connection and hands each
event to the request that subscribed to that stream id.

The stream is a side channel: the workflow's result stays the answer of record. A publish that
fails is logged and generation goes on; a notification that is lost shows as a gap the final
event (the whole answer) closes.

An event's `part` names one generation attempt (model and attempt number): a new part means the
earlier text was abandoned (a retry, or the fallback model) and the client should start over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

import psycopg

log = logging.getLogger(__name__)

CHANNEL = "durable_rag_tokens"
# NOTIFY payloads must stay under 8000 bytes; JSON escaping can double a character's size.
MAX_TEXT_CHARS = 1_800
STREAM_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


def psycopg_conninfo(sqlalchemy_url: str) -> str:
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass(frozen=True)
class TokenEvent:
    stream_id: str
    part: str
    text: str = ""  # new text since the previous event of this part
    end: bool = False  # the part finished: no more text comes for it

    def encode(self) -> str:
        return json.dumps({"s": self.stream_id, "p": self.part, "t": self.text, "e": self.end})

    @classmethod
    def decode(cls, payload: str) -> TokenEvent:
        raw = json.loads(payload)
        return cls(stream_id=raw["s"], part=raw["p"], text=raw["t"], end=raw["e"])


class TokenPublisher:
    """NOTIFY on one autocommit connection per worker process, opened on first use."""

    def __init__(self, sqlalchemy_url: str) -> None:
        self._conninfo = psycopg_conninfo(sqlalchemy_url)
        self._conn: psycopg.AsyncConnection | None = None
        self._lock = asyncio.Lock()

    async def publish(self, event: TokenEvent) -> None:
        pieces = [
            event.text[i : i + MAX_TEXT_CHARS] for i in range(0, len(event.text), MAX_TEXT_CHARS)
        ]
        events = [TokenEvent(event.stream_id, event.part, piece) for piece in pieces[:-1]]
        events.append(
            TokenEvent(event.stream_id, event.part, pieces[-1] if pieces else "", event.end)
        )
        try:
            async with self._lock:
                if self._conn is None or self._conn.closed:
                    self._conn = await psycopg.AsyncConnection.connect(
                        self._conninfo, autocommit=True
                    )
                for item in events:
                    await self._conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, item.encode()))
        except psycopg.Error as exc:
            # Streaming is best effort: the answer still arrives whole in the workflow's result.
            log.warning("token stream %s: publish failed: %s", event.stream_id, exc)
            await self.close()

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
            self._conn = None


class TokenListener:
    """One LISTEN connection for a gateway process, fanned out to per-request queues."""

    def __init__(self, sqlalchemy_url: str) -> None:
        self._conninfo = psycopg_conninfo(sqlalchemy_url)
        self._queues: dict[str, asyncio.Queue[TokenEvent]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None

    async def start(self) -> None:
        if self._task is not None and not self._task.done():
            return
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._listen(self._ready), name="token-listener")
        waiter = asyncio.create_task(self._ready.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():
            self._task.result()  # the connection failed: say why

    async def _listen(self, ready: asyncio.Event) -> None:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
            ready.set()
            async for notify in conn.notifies():
                try:
                    event = TokenEvent.decode(notify.payload)
                except (ValueError, KeyError):
                    continue
                queue = self._queues.get(event.stream_id)
                if queue is not None:
                    queue.put_nowait(event)
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def open(self, stream_id: str) -> asyncio.Queue[TokenEvent]:
        """Subscribe before starting the workflow, so no early token is missed; `close_stream`
        when done."""
        await self.start()
        queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._queues[stream_id] = queue
        return queue

    def close_stream(self, stream_id: str) -> None:
        self._queues.pop(stream_id, None)

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._task
            self._task = None
