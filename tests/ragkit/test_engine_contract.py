"""One contract, two engines: the scripted engine the integration tier runs on, and vLLM.

The same assertions run over `ScriptedEngine` (tests/engines.py) and the session's `VllmEngine`:
streaming, token counts, abort on cancel, and the errors for a prompt that is too long or for
sampling the model cannot honour. A test that moves to the scripted engine relies on nothing
this contract does not hold the real one to.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ragkit.llm.engine import InvalidSamplingError, LLMEngine, PromptTooLongError
from schemas.answer import Sampling
from tests.engines import ScriptedEngine

STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def long_reply(messages: list[dict[str, str]]) -> str:
    return " ".join(f"The keeper climbed stair number {n} in the storm." for n in range(200))


@pytest.fixture(
    params=[
        "scripted",
        pytest.param("vllm", marks=[pytest.mark.e2e, pytest.mark.integration]),
    ]
)
def any_engine(request: pytest.FixtureRequest) -> LLMEngine:
    if request.param == "vllm":
        engine: LLMEngine = request.getfixturevalue("engine")
        return engine
    # Slow enough that a cancel lands mid-generation, as on a CPU engine.
    return ScriptedEngine(long_reply, seconds_per_token=0.02)


async def test_tokens_stream_as_they_come_and_the_counts_are_the_engines(
    any_engine: LLMEngine,
) -> None:
    seen: list[tuple[int, str]] = []
    result = await any_engine.generate(
        STORY, 12, uuid.uuid4().hex, lambda n, text: seen.append((n, text))
    )
    assert result.prompt_tokens == any_engine.count_prompt_tokens(STORY) > 0
    assert (result.completion_tokens, result.finish_reason) == (12, "length")
    counts = [n for n, _ in seen]
    assert counts == sorted(counts) and counts[-1] == 12 and len(seen) >= 2
    assert seen[-1][1] == result.text and result.text.strip()
    assert all(result.text.startswith(text) for _, text in seen[:-1])
    assert result.model == any_engine.model_name
    assert 0 < result.first_token_seconds <= result.seconds
    assert any_engine.running_requests() == 0


async def test_a_cancelled_generation_is_aborted_in_the_engine(any_engine: LLMEngine) -> None:
    started = asyncio.Event()
    task = asyncio.ensure_future(
        any_engine.generate(STORY, 400, uuid.uuid4().hex, lambda n, text: started.set())
    )
    await asyncio.wait_for(started.wait(), 60)
    assert any_engine.running_requests() == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 1.0
    while any_engine.running_requests() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert any_engine.running_requests() == 0


async def test_a_prompt_over_the_context_is_refused_before_it_runs(any_engine: LLMEngine) -> None:
    words = " ".join(["lighthouse"] * any_engine.max_model_len)
    with pytest.raises(PromptTooLongError, match="exceeds the model's context"):
        await any_engine.generate([{"role": "user", "content": words}], 8, uuid.uuid4().hex)
    fits = any_engine.count_prompt_tokens(STORY)
    with pytest.raises(PromptTooLongError):
        await any_engine.generate(STORY, any_engine.max_model_len - fits + 1, uuid.uuid4().hex)
    assert any_engine.running_requests() == 0


async def test_sampling_the_model_cannot_honour_is_refused(any_engine: LLMEngine) -> None:
    bad = Sampling(logit_bias={10**9: 1.0})
    with pytest.raises(InvalidSamplingError, match="outside this model's vocabulary"):
        await any_engine.generate(STORY, 8, uuid.uuid4().hex, sampling=bad)
    assert any_engine.running_requests() == 0


@pytest.mark.e2e
@pytest.mark.integration
def test_the_scripted_engine_counts_prompts_as_vllm_does(engine: LLMEngine) -> None:
    scripted = ScriptedEngine()
    messages = [
        {"role": "system", "content": "Answer from the passages; cite them as [n]."},
        {"role": "user", "content": "Passages:\n\n[1] Ken Thompson wrote UTF-8.\n\nQuestion: who?"},
    ]
    assert scripted.count_prompt_tokens(messages) == engine.count_prompt_tokens(messages)
    assert (scripted.model_name, scripted.max_model_len) == (
        engine.model_name,
        engine.max_model_len,
    )
