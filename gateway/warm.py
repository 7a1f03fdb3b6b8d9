"""What a live request reads from Postgres before its workflow starts, read ahead of it: the
tenant of its API key and the default model alias (`RagClient.default_model`).

Each costs a round trip in a worker thread, a millisecond or two on the way to the first token.
While requests keep coming (one within `keep_seconds`), the gateway's refresher re-reads both
every `period_seconds`, so a request finds them fresh and makes no round trip of its own. An idle
gateway reads the default model alone, once every IDLE_MODEL_SECONDS: admission needs it at the
door (gateway/door.py), and a burst after a quiet minute once waited ~140 ms for that one read
before its first refusal. Its first request's key is read for it.

Freshness is what it was with a read per request, within a bound: a key is trusted for at most
KEY_TTL_SECONDS after a read that found it valid began, so a revoked key (or a deleted tenant's)
is refused on every gateway within that; the default model keeps its own TTL, which a model swap
waits out (durable_rag/client.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from durable_rag.client import DEFAULT_MODEL_STALE_SECONDS, DEFAULT_MODEL_TTL_SECONDS, RagClient
from gateway.streams import stop_task
from ragkit.store import keys
from ragkit.streaming import TokenListener

log = logging.getLogger("durable_rag.gateway")

# How long a key found valid is trusted: the bound on how late a revocation takes effect.
KEY_TTL_SECONDS = 1.0
# Under both TTLs with room for a slow read, so a request never finds either stale.
REFRESH_SECONDS = DEFAULT_MODEL_TTL_SECONDS / 2
# How long after the last request the refresher keeps reading.
KEEP_SECONDS = 60.0
# How often an idle gateway reads the default model: within DEFAULT_MODEL_STALE_SECONDS, so the
# door always has one recent enough to use at once (one query a second).
IDLE_MODEL_SECONDS = 1.0


@dataclass
class _Known:
    tenant: str
    checked_at: float  # when the read that found the key valid began (monotonic)
    used_at: float


class ApiKeys:
    """The tenants of the API keys in use, each checked against Postgres within `ttl` seconds.
    Read on the event loop; `lookup` and `refresh` block and run in worker threads (the dict's
    single operations are atomic, so neither needs a lock)."""

    def __init__(self, sessions: sessionmaker[Session], ttl: float = KEY_TTL_SECONDS) -> None:
        self.sessions, self.ttl = sessions, ttl
        self._known: dict[str, _Known] = {}  # key hash -> what the last read found

    def cached(self, key: str) -> str | None:
        """The key's tenant when a read within the TTL found it valid; None: read it."""
        known = self._known.get(keys.key_hash(key))
        now = time.monotonic()
        if known is None or now - known.checked_at >= self.ttl:
            return None
        known.used_at = now
        return known.tenant

    def lookup(self, key: str) -> str | None:
        """Blocking: the key's tenant from Postgres (None: unknown or revoked), remembered."""
        began = time.monotonic()
        tenant = keys.tenant_for(self.sessions, key)
        hashed = keys.key_hash(key)
        if tenant is None:
            self._known.pop(hashed, None)  # only valid keys are kept: no growth from guesses
        else:
            self._known[hashed] = _Known(tenant, began, time.monotonic())
        return tenant

    def refresh(self, keep: float = KEEP_SECONDS) -> None:
        """Blocking: re-check every key used within `keep` seconds in one query; forget the
        rest, and those revoked since."""
        began = time.monotonic()
        for hashed, known in list(self._known.items()):
            if began - known.used_at > keep:
                self._known.pop(hashed, None)
        hashes = list(self._known)
        valid = keys.tenants_of(self.sessions, hashes)
        for hashed in hashes:
            if hashed not in valid:
                self._known.pop(hashed, None)
            elif (still := self._known.get(hashed)) is not None:
                still.tenant, still.checked_at = valid[hashed], began

    def __len__(self) -> int:
        return len(self._known)


class Refresher:
    """The gateway's task that reads ahead of live requests (this module's docstring)."""

    def __init__(
        self,
        rag: RagClient,
        api_keys: ApiKeys,
        period_seconds: float = REFRESH_SECONDS,
        keep_seconds: float = KEEP_SECONDS,
        idle_model_seconds: float = IDLE_MODEL_SECONDS,
    ) -> None:
        assert idle_model_seconds < DEFAULT_MODEL_STALE_SECONDS
        self.rag, self.api_keys = rag, api_keys
        self.period, self.keep, self.idle_model = period_seconds, keep_seconds, idle_model_seconds
        self._requested_at = float("-inf")
        self._model_read_at = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def requested(self) -> None:
        """A request came: keep reading ahead for `keep_seconds` more."""
        self._requested_at = time.monotonic()

    @property
    def busy(self) -> bool:
        return time.monotonic() - self._requested_at <= self.keep

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="gateway-read-ahead")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            busy = self.busy
            if not busy and time.monotonic() - self._model_read_at < self.idle_model:
                continue
            try:
                self._model_read_at = time.monotonic()
                await self.rag.default_model(fresh=True)
                if busy:
                    await asyncio.to_thread(self.api_keys.refresh, self.keep)
            except SQLAlchemyError as exc:  # requests then read for themselves
                log.warning("cannot read ahead of live requests: %s", exc)


async def open_token_stream(listener: TokenListener) -> None:
    """Before the first request: the LISTEN connection every token stream waits for. Opened by
    the first stream otherwise, with the streams of a burst's first moments queued behind it on
    the event loop that answers the burst's refusals. One that cannot open now is said and left
    to the first stream, as before (streams answer 503 while Postgres cannot LISTEN)."""
    try:
        await listener.start()
    except Exception as exc:  # psycopg's or the socket's
        log.warning("cannot LISTEN for token streams yet: %s", exc)


# How long the warm-up's connections wait for each other: a Postgres that cannot give them all
# at once within this is said and left to the requests, as before.
_WARM_WAIT_SECONDS = 10.0


async def open_pool(sessions: sessionmaker[Session]) -> int:
    """Before the first request: the pool's connections open, the worker threads that use them
    started, and the key lookup's statement compiled. A fresh gateway otherwise does all of it
    inside its first burst, on the CPU that answers the burst's refusals: Postgres forks a
    backend per new connection, each new thread waits to be scheduled, and the first burst's
    slowest 429 came 95-155 ms after its request against 60-90 ms for the bursts after it.
    Returns the connections opened; one Postgres cannot give is said and left to the requests."""
    engine = sessions.kw["bind"]
    count = engine.pool.size()
    together = threading.Barrier(count, timeout=_WARM_WAIT_SECONDS)

    def hold_one() -> None:
        # Each holds its connection until all are out, so the pool opens `count` of them and
        # the loop's executor starts as many threads; they stay in the pool when returned.
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("SELECT 1")
                together.wait()
        except BaseException:
            together.abort()  # the others stop waiting at once
            raise

    held = await asyncio.gather(
        *(asyncio.to_thread(hold_one) for _ in range(count)), return_exceptions=True
    )
    failed = next((r for r in held if isinstance(r, BaseException)), None)
    try:
        if failed is not None:
            raise failed
        await asyncio.to_thread(keys.tenants_of, sessions, [keys.key_hash("warm-up")])
    except (SQLAlchemyError, threading.BrokenBarrierError) as exc:
        log.warning("cannot open the Postgres pool ahead of requests: %s", exc)
        return 0
    return count


async def import_lazy() -> None:
    """Before the first request: what the first requests would import. A fresh gateway's first
    streamed response loaded anyio's asyncio backend (Starlette's threads and task groups run on
    it), ~15 ms on this project's 2-CPU machine among its first burst's refusals; its first
    connection to a named host, the IDNA codec."""
    import encodings.idna  # noqa: F401
    import stringprep  # noqa: F401

    await run_in_threadpool(lambda: None)  # loads the backend
