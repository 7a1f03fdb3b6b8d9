"""Hot model swap under a continuous query loop (R13): zero failed or degraded answers."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_rag import model_swap as models
from durable_rag.client import (
    DEFAULT_MODEL_STALE_SECONDS,
    DEFAULT_MODEL_TTL_SECONDS,
    RagClient,
)
from ragkit import policies
from ragkit.embedding import Embedder
from ragkit.llm.engine import LLMEngine
from ragkit.store import model_alias
from schemas.answer import Answer, AskRequest
from tests.conftest import Database, make_settings, running_stack
from workers import llm as llm_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_a_swap_under_a_query_loop_fails_no_request_and_switches_every_new_answer(
    client: Client, database: Database, embedder: Embedder, llm_engine: LLMEngine, tmp_path: Path
) -> None:
    old, new = f"old-{uuid.uuid4().hex[:6]}", f"new-{uuid.uuid4().hex[:6]}"
    async with running_stack(
        client, database, embedder, tmp_path / "data", worker_drain_seconds=120
    ) as stack:
        settings = stack.settings.model_copy(update={"llm_served_name": old})
        rag = RagClient(client, settings, database.sessions)
        assert await rag.default_model() == old  # no swap yet: the settings' model
        old_worker = llm_worker.build_worker(
            client, settings, llm_engine, task_queue=policies.llm_queue(old)
        )
        new_worker = llm_worker.build_worker(
            client, settings, llm_engine, task_queue=policies.llm_queue(new)
        )
        old_running = asyncio.create_task(old_worker.run())
        answers: list[tuple[float, Answer]] = []
        failures: list[str] = []
        stop = asyncio.Event()

        async def query_loop(n: int) -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    answer = await rag.ask(
                        AskRequest(
                            tenant="t",
                            question=f"Question {n}: what is UTF-8?",
                            max_answer_tokens=24,
                        )
                    )
                except Exception as exc:
                    failures.append(repr(exc))
                else:
                    answers.append((started, answer))

        async def answered(model: str, count: int, after: float = 0.0) -> None:
            deadline = time.monotonic() + 240
            while sum(1 for t, a in answers if a.model == model and t > after) < count:
                assert not failures, failures
                assert time.monotonic() < deadline, f"fewer than {count} answers by {model}"
                await asyncio.sleep(0.1)

        loops = [asyncio.create_task(query_loop(n)) for n in range(3)]
        new_running: asyncio.Task[None] | None = None
        try:
            await answered(old, 3)
            # The new model's worker loads and polls; then the swap.
            new_running = asyncio.create_task(new_worker.run())

            async def stop_old(previous: str) -> None:
                assert previous == old
                await old_worker.shutdown()  # drains: running generations finish

            report = await models.swap(
                client, database.sessions, new, old, stop_old, ready_timeout=60
            )
            swapped = time.monotonic()
            assert old_running.done(), "the old worker has stopped"
            await answered(new, 3, after=swapped)
        finally:
            stop.set()
            await asyncio.gather(*loops)
            if new_running is not None:
                await new_worker.shutdown()
            if not old_running.done():
                await old_worker.shutdown()
            await asyncio.gather(old_running, *([new_running] if new_running else []))
    assert failures == []
    assert (report.previous, report.model) == (old, new)
    assert await asyncio.to_thread(model_alias.active, database.sessions, "x") == new
    for started, answer in answers:
        assert answer.route == "primary" and answer.degradations == [], answer
        if started > swapped:
            assert answer.model == new, "an answer started after the swap used the old model"
    assert {a.model for _, a in answers} == {old, new}


async def test_a_swap_to_a_model_nobody_serves_changes_nothing(
    client: Client, database: Database
) -> None:
    with pytest.raises(models.SwapError, match="no worker polls llm-ghost"):
        await models.swap(client, database.sessions, "ghost", "current", ready_timeout=1)
    assert model_alias.active(database.sessions, "current") == "current"


async def test_the_default_model_is_read_once_per_ttl_and_fresh_on_demand(
    client: Client, database: Database
) -> None:
    """Live requests reuse the alias they read moments ago (no database round trip before their
    workflow starts); readiness asks for a fresh read. Past the TTL, a read under
    DEFAULT_MODEL_STALE_SECONDS old still answers at once while the next read runs: that is
    shorter than the two seconds after the switch whose answers a swap waits for, so every answer
    started on the old alias is drained before the old worker stops."""
    assert DEFAULT_MODEL_TTL_SECONDS < 1.0 and DEFAULT_MODEL_STALE_SECONDS < 2.0
    rag = RagClient(client, make_settings(llm_served_name="before"), database.sessions)
    assert await rag.default_model() == "before"
    model_alias.activate(database.sessions, "after", "before")
    assert await rag.default_model() == "before"  # read moments ago
    assert await rag.default_model(fresh=True) == "after"
    model_alias.activate(database.sessions, "again", "before")
    await asyncio.sleep(DEFAULT_MODEL_TTL_SECONDS)
    assert await rag.default_model() == "after"  # at once; the next read is on its way
    deadline = time.monotonic() + 5
    while await rag.default_model() != "again":  # that read lands
        assert time.monotonic() < deadline, "the read past the TTL never landed"
        await asyncio.sleep(0.02)
    model_alias.activate(database.sessions, "last", "before")
    await asyncio.sleep(DEFAULT_MODEL_STALE_SECONDS)
    assert await rag.default_model() == "last"  # too old to use: read before answering
