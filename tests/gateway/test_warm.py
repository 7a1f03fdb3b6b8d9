"""Reading ahead of live requests (gateway/warm.py) on the real Postgres: the keys in use and
the default model alias are fresh when a request comes, a revoked key is refused within the
TTL, and an idle gateway reads nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from sqlalchemy import event
from temporalio.client import Client

from durable_rag.client import DEFAULT_MODEL_STALE_SECONDS, DEFAULT_MODEL_TTL_SECONDS, RagClient
from gateway.warm import KEY_TTL_SECONDS, ApiKeys, Refresher, open_pool
from ragkit.db import make_sessionmaker
from ragkit.store import keys, model_alias
from tests.conftest import Database, make_settings

pytestmark = pytest.mark.integration


class Queries:
    """Counts the statements sent to Postgres through a sessionmaker's engine."""

    def __init__(self, database: Database) -> None:
        self.count = 0
        event.listen(database.sessions.kw["bind"], "after_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1


def test_a_key_is_trusted_within_its_ttl_and_a_revoked_one_is_refused_after_it(
    database: Database,
) -> None:
    assert KEY_TTL_SECONDS <= 1.0  # the revocation bound README promises
    api_keys = ApiKeys(database.sessions, ttl=0.5)
    info, key = keys.create_key(database.sessions, "acme")
    assert api_keys.cached(key) is None  # never read: the request reads it
    assert api_keys.lookup(key) == "acme"
    queries = Queries(database)
    assert api_keys.cached(key) == "acme" and queries.count == 0
    assert keys.revoke_key(database.sessions, info.prefix) is not None
    time.sleep(0.5)
    assert api_keys.cached(key) is None
    assert api_keys.lookup(key) is None and len(api_keys) == 0

    # A refresh re-checks every key in use in one query, and forgets a revoked one at once.
    first, second = keys.create_key(database.sessions, "a"), keys.create_key(database.sessions, "b")
    assert api_keys.lookup(first[1]) == "a" and api_keys.lookup(second[1]) == "b"
    assert keys.revoke_key(database.sessions, second[0].prefix) is not None
    before = queries.count
    api_keys.refresh()
    assert queries.count - before == 1
    assert api_keys.cached(first[1]) == "a" and api_keys.cached(second[1]) is None

    # Guesses are never kept, and keys unused for `keep` seconds are dropped.
    assert api_keys.lookup("drk_" + "x" * 43) is None and len(api_keys) == 1
    time.sleep(0.02)
    api_keys.refresh(keep=0.01)
    assert len(api_keys) == 0


async def test_the_refresher_reads_ahead_while_requests_come_and_nothing_when_idle(
    client: Client, database: Database
) -> None:
    rag = RagClient(client, make_settings(llm_served_name="before"), database.sessions)
    api_keys = ApiKeys(database.sessions, ttl=0.5)
    info, key = keys.create_key(database.sessions, "acme")
    assert await asyncio.to_thread(api_keys.lookup, key) == "acme"
    assert await rag.default_model() == "before"
    queries = Queries(database)
    refresher = Refresher(rag, api_keys, period_seconds=0.05, keep_seconds=1.0)
    try:
        refresher.start()
        refresher.requested()
        model_alias.activate(database.sessions, "after", "before")
        await asyncio.sleep(0.8)  # past the key's TTL: only a re-read keeps it trusted
        await refresher.stop()
        await asyncio.sleep(0.05)  # a read already in its thread lands
        read_ahead = queries.count
        assert read_ahead > 0
        # What a request reads is there, fresh, with no round trip of its own.
        assert await rag.default_model() == "after"
        assert api_keys.cached(key) == "acme"
        assert queries.count == read_ahead

        refresher.start()
        assert keys.revoke_key(database.sessions, info.prefix) is not None
        await asyncio.sleep(0.6)
        assert api_keys.cached(key) is None  # refused within the TTL

        while refresher.busy:  # no request for `keep_seconds`: the refresher reads less
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # a read begun while it was busy lands first
        # Idle: the default model alone, every `idle_model_seconds`; the keys are not read.
        api_keys.lookup(keys.create_key(database.sessions, "idle")[1])
        before = queries.count
        await rag.default_model(fresh=True)
        statements_per_read = queries.count - before
        idle = queries.count
        await asyncio.sleep(2.2)
        model_reads = queries.count - idle
        assert 1 <= model_reads <= 3 * statements_per_read, model_reads
        assert len(api_keys) == 1  # never re-checked: a refresh would have forgotten it (unused)
    finally:
        await refresher.stop()


async def test_requests_that_find_the_default_model_stale_share_one_read(
    client: Client, database: Database
) -> None:
    """A burst that finds the alias past its TTL makes one round trip, not one per request."""
    rag = RagClient(client, make_settings(llm_served_name="before"), database.sessions)
    await rag.refresh_served_models()  # its own read, every 10 s: not what is counted here
    model_alias.activate(database.sessions, "after", "before")
    queries = Queries(database)
    models = await asyncio.gather(*(rag.default_model() for _ in range(200)))
    assert set(models) == {"after"}
    reads = queries.count
    assert 1 <= reads <= 2  # one read (its session may send a statement more)
    # Past its TTL but recent: the last read answers at once, and one read runs for the rest.
    await asyncio.sleep(DEFAULT_MODEL_TTL_SECONDS)
    model_alias.activate(database.sessions, "again", "before")
    before = queries.count
    assert await rag.default_model() == "after"
    await rag._default_reading  # type: ignore[misc]
    assert queries.count - before == reads
    assert await rag.default_model() == "again"
    # Too old to use: they wait for the read; one that is cancelled leaves it to the others.
    time.sleep(DEFAULT_MODEL_STALE_SECONDS)
    before = queries.count
    waiters = [asyncio.ensure_future(rag.default_model()) for _ in range(3)]
    await asyncio.sleep(0)
    waiters[0].cancel()
    assert await asyncio.gather(*waiters[1:]) == ["again", "again"]
    assert queries.count - before == reads


async def test_a_starting_gateway_opens_its_pool_and_threads_before_the_first_request(
    database: Database,
) -> None:
    """What a fresh gateway's first burst paid (new Postgres backends, new worker threads, the
    key lookup's first compile) is paid at start: the first lookup after it opens nothing."""
    sessions = make_sessionmaker(database.url)  # a fresh engine: nothing opened yet
    engine = sessions.kw["bind"]
    opened = Queries(Database(database.url, database.name, sessions))
    connects: list[object] = []
    event.listen(engine, "connect", lambda *_: connects.append(object()))
    assert await open_pool(sessions) == engine.pool.size() == 5
    assert len(connects) == 5 and engine.pool.checkedin() == 5
    # The loop's executor has started five threads: five blocking calls at once start no more.
    threads, together = threading.active_count(), threading.Barrier(5, timeout=10)
    await asyncio.gather(*(asyncio.to_thread(together.wait) for _ in range(5)))
    assert threading.active_count() == threads
    assert opened.count >= 6  # a SELECT 1 each and the key lookup
    _, key = keys.create_key(database.sessions, "acme")
    assert await asyncio.to_thread(ApiKeys(sessions).lookup, key) == "acme"
    assert len(connects) == 5  # the lookup found its connection open
    engine.dispose()


async def test_a_pool_postgres_cannot_fill_is_left_to_the_requests(database: Database) -> None:
    """A Postgres that refuses connections delays no start: it is said and the requests open
    their own, as before."""
    sessions = make_sessionmaker(database.url.replace(f"/{database.name}", "/no_such_database"))
    assert await open_pool(sessions) == 0
    sessions.kw["bind"].dispose()


async def test_admission_takes_the_default_model_as_last_read_and_never_waits_for_postgres(
    client: Client, database: Database
) -> None:
    rag = RagClient(client, make_settings(llm_served_name="before"), database.sessions)
    assert await rag.admission_model() == "before"  # never read: this one reads it
    model_alias.activate(database.sessions, "after", "before")
    time.sleep(DEFAULT_MODEL_STALE_SECONDS)  # too old for a request's start to use
    queries = Queries(database)
    assert await rag.admission_model() == "before"  # at once: the read it started runs behind
    assert queries.count == 0
    await rag._default_reading  # type: ignore[misc]
    assert await rag.admission_model() == "after" and queries.count >= 1


def test_a_starting_gateway_imports_what_a_first_stream_would() -> None:
    """In a fresh interpreter: after `import_lazy`, anyio's asyncio backend (Starlette's threads
    and task groups) is loaded, so a first burst does not load it among its refusals."""
    script = (
        "import asyncio, sys\n"
        "from gateway.warm import import_lazy\n"
        "assert 'anyio._backends._asyncio' not in sys.modules\n"
        "asyncio.run(import_lazy())\n"
        "assert 'anyio._backends._asyncio' in sys.modules and 'encodings.idna' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
