"""Live reads look the active generation up at most every SERVING_TTL_SECONDS; a switch in this
process reaches them at once, one made elsewhere within the TTL, and a retired generation is
dropped no sooner than every reader's lookup has expired. Writes always read the pointer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from ragkit.db import GenerationStatus, IndexGeneration
from ragkit.index import generations as generations_module
from ragkit.index.generations import SERVING_TTL_SECONDS, Generations, drop_wait
from tests.conftest import Database, make_settings
from tests.ragkit.index.test_contract import DIM, open_adapter

pytestmark = pytest.mark.integration

MODEL = "test-model"


@pytest.fixture
def generations(database: Database, tmp_path: Path) -> Iterator[Generations]:
    settings = make_settings(database_url=database.url, data_dir=tmp_path, vector_backend="edge")
    opened = open_adapter("edge", tmp_path)
    generations = Generations(settings, database.sessions, MODEL, DIM, opened=opened)
    yield generations
    generations.close()


def switch_elsewhere(database: Database, generations: Generations, to: str) -> None:
    """What another process's activation commits: the pointer moves, this process is not told."""
    with database.sessions.begin() as session:
        session.execute(
            update(IndexGeneration)
            .where(IndexGeneration.collection == generations.collection)
            .values(status=GenerationStatus.RETIRED)
        )
        session.add(
            IndexGeneration(
                collection=generations.collection,
                name=to,
                status=GenerationStatus.ACTIVE,
                embedding_model=MODEL,
                dimension=DIM,
                hnsw_m=16,
                hnsw_ef_construct=100,
            )
        )


def test_live_reads_reuse_the_lookup_and_see_a_switch_elsewhere_within_the_ttl(
    generations: Generations, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = generations.serving()
    assert first is generations.active()
    reads: list[int] = []
    original = generations.rows
    monkeypatch.setattr(generations, "rows", lambda *s: reads.append(1) or original(*s))
    for _ in range(20):
        assert generations.serving() is first
    assert reads == []  # no round trip per search
    switch_elsewhere(database, generations, f"{generations.collection}-g2")
    assert generations.serving() is first  # within the TTL: the generation looked up before
    time.sleep(SERVING_TTL_SECONDS)
    assert generations.serving() is not first
    assert reads == [1]
    assert len(generations.writers()) == 1 and reads == [1, 1]  # writes read the pointer


def test_a_switch_or_a_drop_in_this_process_reaches_live_reads_at_once(
    generations: Generations, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generations_module, "SERVING_TTL_SECONDS", 3_600.0)
    first = generations.serving()
    switch_elsewhere(database, generations, f"{generations.collection}-g2")
    assert generations.serving() is first
    generations.forget_serving()  # what activate_generation does once it committed
    second = generations.serving()
    assert second is not first
    generations.drop(generations.collection)
    assert generations.serving() is second  # a fresh lookup: the active one, still open


def test_a_retired_generation_waits_out_every_readers_lookup_before_it_is_dropped() -> None:
    now = datetime.now(UTC)
    assert drop_wait(None, now) == 0.0  # never active: nobody reads it
    assert drop_wait(now, now) == pytest.approx(2 * SERVING_TTL_SECONDS)
    assert drop_wait(now - timedelta(seconds=SERVING_TTL_SECONDS), now) == pytest.approx(
        SERVING_TTL_SECONDS
    )
    assert drop_wait(now - timedelta(hours=1), now) == 0.0
