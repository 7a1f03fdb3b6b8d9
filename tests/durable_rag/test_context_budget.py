"""The context budget of an answer follows what each model's LLM worker serves (issue 19,
section 3): compose runs its gateway with one max_model_len and its LLM worker with another."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from durable_rag.client import PROMPT_OVERHEAD_TOKENS, RagClient
from ragkit.llm.engine import LLMEngine
from ragkit.store import served_models
from tests.conftest import Database, make_settings
from workers import llm as llm_worker

pytestmark = pytest.mark.integration

ANSWER = 256


def budget(max_model_len: int) -> int:
    return max_model_len - ANSWER - PROMPT_OVERHEAD_TOKENS


def test_a_restarted_worker_replaces_what_its_model_announced(database: Database) -> None:
    served_models.announce(database.sessions, "model-a", 4096)
    served_models.announce(database.sessions, "model-b", 1024)
    served_models.announce(database.sessions, "model-a", 8192)
    assert served_models.context_lengths(database.sessions) == {"model-a": 8192, "model-b": 1024}


async def test_the_llm_worker_announces_what_its_engine_serves(
    database: Database, llm_engine: LLMEngine
) -> None:
    settings = make_settings(database_url=database.url)
    await llm_worker.announce(settings, llm_engine)
    lengths = served_models.context_lengths(database.sessions)
    assert lengths == {llm_engine.model_name: llm_engine.max_model_len}


async def test_the_budget_is_the_smallest_context_of_the_models_that_may_answer(
    client: Client, database: Database
) -> None:
    settings = make_settings(
        database_url=database.url,
        llm_served_name="main-model",
        llm_max_model_len=2048,
        llm_fallback_model="fallback-model",
        llm_max_answer_tokens=2048,
    )
    rag = RagClient(client, settings)
    try:
        # No worker announced yet: the gateway's own setting.
        await rag.refresh_served_models(force=True)
        assert rag.context_tokens(ANSWER) == budget(2048)

        served_models.announce(database.sessions, "main-model", 8192)
        served_models.announce(database.sessions, "fallback-model", 8192)
        await rag.refresh_served_models()  # read moments ago: still trusted
        assert rag.context_tokens(ANSWER) == budget(2048)
        await rag.default_model()  # every live entry point refreshes, once per TTL
        rag._served_read_at = float("-inf")  # as if the TTL had passed
        await rag.default_model()
        assert rag.context_tokens(ANSWER) == budget(8192)
        assert rag.answer_plan(ANSWER, 5).context_tokens == budget(8192)

        # The fallback may answer the same prompt: its smaller context bounds the budget.
        served_models.announce(database.sessions, "fallback-model", 1024)
        await rag.refresh_served_models(force=True)
        assert rag.answer_plan(ANSWER, 5).context_tokens == budget(1024)
        assert rag.answer_plan(ANSWER, 5, "other-model").context_tokens == budget(1024)
        with pytest.raises(ValueError, match="in the model's 1024 tokens"):
            rag.context_tokens(900)
    finally:
        rag.close()

    # Without a fallback, a model named in the request gets its own worker's context.
    alone = RagClient(client, settings.model_copy(update={"llm_fallback_model": ""}))
    try:
        served_models.announce(database.sessions, "big-model", 32768)
        await alone.refresh_served_models(force=True)
        assert alone.answer_plan(ANSWER, 5, "big-model").context_tokens == budget(32768)
        assert alone.answer_plan(ANSWER, 5).context_tokens == budget(8192)
        # A model no worker announced: the setting, the best guess there is.
        assert alone.answer_plan(ANSWER, 5, "unknown-model").context_tokens == budget(2048)
    finally:
        alone.close()
