"""The `openai` engine backend against a real OpenAI-compatible server: vLLM (CPU) serving SmolLM2."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from bench.otlp import OtlpReceiver
from durable_rag.stack.process import free_port
from ragkit import tracing
from ragkit.llm.engine import (
    InvalidSamplingError,
    OpenAIEngine,
    PromptTooLongError,
)
from ragkit.llm.models import PACKAGED_SMOLLM2, resolve_generator
from ragkit.settings import Settings
from schemas.answer import Sampling
from tests.spans import recorded

# A second vLLM load (the server) for the `openai` backend: `make test-full`.
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.full, pytest.mark.slow]

SERVED = "smol-openai"


def running_requests(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+-]+)$", text, re.M)
    assert values, "the server exposes no vllm:num_requests_running"
    return sum(float(v) for v in values)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """Where the server exports its request spans (`--otlp-traces-endpoint`)."""
    running = OtlpReceiver().start()
    yield running
    running.close()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver
) -> Iterator[tuple[int, str]]:
    settings = Settings()
    model = resolve_generator(PACKAGED_SMOLLM2, settings.data_dir.resolve())
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="vllm-server",
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                "--model", model, "--served-model-name", SERVED,
                "--dtype", "float32", "--enforce-eager",
                "--max-model-len", "2048", "--gpu-memory-utilization", "0.25",
                "--host", "127.0.0.1", "--port", str(port),
                "--otlp-traces-endpoint", receiver.url,
            ],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vLLM server exited:\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"vLLM server not healthy:\n{log.read_text()[-3000:]}"
                    ) from exc
                time.sleep(1)
        yield port, model
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def engine_for(port: int, model: str) -> OpenAIEngine:
    return OpenAIEngine(
        f"http://127.0.0.1:{port}/v1", SERVED, 2048, tokenizer_path=model, timeout=60
    )


async def test_generates_through_the_server(server: tuple[int, str]) -> None:
    engine = engine_for(*server)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    result = await engine.generate(messages, 16, "req-1")
    assert "paris" in result.text.lower()
    assert result.completion_tokens > 0 and result.prompt_tokens > 0
    assert result.model == SERVED
    assert engine.count_prompt_tokens(messages) == result.prompt_tokens


async def test_over_long_prompt_is_refused_before_the_server_sees_it(
    server: tuple[int, str],
) -> None:
    engine = engine_for(*server)
    with pytest.raises(PromptTooLongError, match="exceeds the model's context of 2048"):
        await engine.generate([{"role": "user", "content": "word " * 3000}], 16, "req-2")


async def test_cancelling_stops_generation_on_the_server(server: tuple[int, str]) -> None:
    port, model = server
    engine = engine_for(port, model)
    messages = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
    task = asyncio.ensure_future(engine.generate(messages, 400, "req-3"))
    deadline = time.monotonic() + 60
    while running_requests(port) == 0:
        assert time.monotonic() < deadline and not task.done(), "generation never started"
        await asyncio.sleep(0.05)
    task.cancel()
    cancelled = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    while running_requests(port) > 0:
        assert time.monotonic() - cancelled < 5, "the server kept generating"
        await asyncio.sleep(0.05)
    assert time.monotonic() - cancelled < 1.0


async def test_sampling_fields_reach_the_server(server: tuple[int, str]) -> None:
    engine = engine_for(*server)
    messages = [{"role": "user", "content": "Name the planets of the solar system, in order."}]
    whole = (await engine.generate(messages, 32, "req-4")).text
    words = [w.strip(",.") for w in whole.split() if len(w.strip(",.")) >= 4]
    assert len(words) >= 3, whole
    stop = words[len(words) // 2]
    cut = await engine.generate(messages, 32, "req-5", sampling=Sampling(stop=[stop]))
    assert cut.text.rstrip() == whole[: whole.index(stop)].rstrip(), (whole, stop)
    assert cut.finish_reason == "stop"
    with pytest.raises(InvalidSamplingError, match="outside this model's vocabulary"):
        await engine.generate(messages, 4, "req-6", sampling=Sampling(logit_bias={10**8: 1.0}))


async def test_the_servers_request_span_joins_the_callers_trace(
    server: tuple[int, str], receiver: OtlpReceiver
) -> None:
    """With tracing on, the server's own `llm_request` span (queue, prefill, decode) is the child
    of the span that called it: the `traceparent` header carries it."""
    with recorded():
        engine = engine_for(*server)
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        with tracing.step("generate", tracing.LLM) as span:
            assert span is not None
            result = await engine.generate(messages, 8, "req-traced")
    trace_id = format(span.get_span_context().trace_id, "032x")
    [served] = receiver.wait_for(trace_id, lambda spans: bool(spans))
    assert served.name == "llm_request" and served.service == "vllm-server"
    assert served.parent_id == format(span.get_span_context().span_id, "016x")
    assert served.attributes["gen_ai.usage.completion_tokens"] == result.completion_tokens
