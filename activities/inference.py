"""Inference activities: generation on an LLM worker's engine (vLLM in process, or OpenAI-compatible).

The activity heartbeats while tokens arrive and, for a request with a `stream_id`, publishes the
text as it grows (ragkit/streaming.py). A workflow cancellation reaches it through the next
heartbeat as a cancelled task, and the engine aborts the request: no tokens are generated after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ragkit import policies, tracing
from ragkit.llm.engine import Generation, InvalidSamplingError, LLMEngine, PromptTooLongError
from ragkit.metrics import (
    LLM_FIRST_TOKEN_SECONDS,
    LLM_GENERATION_TOKENS,
    LLM_TOKENS,
    STEP_SECONDS,
)
from ragkit.retrieval import REWRITE_PROMPT, SUMMARY_PROMPT, clean_rewrite
from ragkit.streaming import TokenEvent, TokenPublisher
from schemas.answer import GenerateInput, GenerateOutput, RewriteInput, RewriteOutput
from schemas.conversation import SummarizeInput, SummarizeOutput

HEARTBEAT_EVERY_SECONDS = 0.2
# Streamed text goes out in small batches: one NOTIFY per token would cost more than it shows.
STREAM_EVERY_SECONDS = 0.03


class _Stream:
    """The text a generation has published so far on its stream, sent as deltas."""

    def __init__(self, publisher: TokenPublisher, stream_id: str, part: str) -> None:
        self.publisher, self.stream_id, self.part = publisher, stream_id, part
        self.sent = 0

    async def send(self, text: str, end: bool = False) -> bool:
        """Publish what is new; False when there was nothing to send."""
        if len(text) <= self.sent and not end:
            return False
        delta, self.sent = text[self.sent :], max(self.sent, len(text))
        await self.publisher.publish(TokenEvent(self.stream_id, self.part, delta, end))
        return True


def observe(step: str, result: Generation, trace_id: str = "") -> None:
    """One generation in the metrics: the step's latency (with its trace id as the exemplar, where
    there is one), the first token's latency and the tokens."""
    STEP_SECONDS.labels(step).observe(result.seconds, exemplar=tracing.exemplar(trace_id))
    LLM_FIRST_TOKEN_SECONDS.labels(result.model).observe(result.first_token_seconds)
    LLM_TOKENS.labels(result.model, "prompt").inc(result.prompt_tokens)
    LLM_TOKENS.labels(result.model, "completion").inc(result.completion_tokens)
    LLM_GENERATION_TOKENS.labels(result.model).observe(result.completion_tokens)
    tracing.annotate(
        {
            **tracing.llm(result.model, result.prompt_tokens, result.completion_tokens),
            "durable_rag.finish_reason": result.finish_reason,
            "durable_rag.first_token_seconds": result.first_token_seconds,
            **tracing.content(tracing.OUTPUT, result.text),
        }
    )


def llm_step(
    step: str, model: str, messages: list[dict[str, str]], parameters: dict[str, object]
) -> contextlib.AbstractContextManager[object]:
    """The step's LLM span (ragkit/tracing.py), current while the engine runs it: the engine's
    own span (vLLM's `llm_request`) is its child."""
    return tracing.step(
        step,
        tracing.LLM,
        {
            **tracing.llm(model, parameters=parameters),
            **tracing.messages(tracing.INPUT_MESSAGES, messages),
        },
    )


@contextlib.contextmanager
def prompt_errors() -> Iterator[None]:
    """A prompt over the model's context, or sampling it cannot honour, is the caller's error:
    typed, and never retried."""
    try:
        yield
    except PromptTooLongError as exc:
        raise ApplicationError(str(exc), type=policies.PROMPT_TOO_LONG, non_retryable=True) from exc
    except InvalidSamplingError as exc:
        raise ApplicationError(str(exc), type=policies.INVALID_INPUT, non_retryable=True) from exc


class InferenceActivities:
    def __init__(
        self, engine: LLMEngine, max_answer_tokens: int, publisher: TokenPublisher | None = None
    ) -> None:
        self.engine = engine
        self.max_answer_tokens = max_answer_tokens
        self.publisher = publisher

    def _stream(self, request: GenerateInput, attempt: int) -> _Stream | None:
        if not request.stream_id or self.publisher is None:
            return None
        return _Stream(self.publisher, request.stream_id, f"{self.engine.model_name}:{attempt}")

    @activity.defn
    async def generate(self, request: GenerateInput) -> GenerateOutput:
        messages = [m.model_dump() for m in request.messages]
        parameters = {"max_tokens": request.max_tokens, **request.sampling.model_dump()}
        with llm_step("generate", self.engine.model_name, messages, parameters):
            return await self._generate(request, messages)

    async def _generate(
        self, request: GenerateInput, messages: list[dict[str, str]]
    ) -> GenerateOutput:
        if request.max_tokens > self.max_answer_tokens:
            raise ApplicationError(
                f"max_tokens {request.max_tokens} is over this worker's limit of "
                f"{self.max_answer_tokens}",
                type=policies.INVALID_INPUT,
                non_retryable=True,
            )
        tokens, text, grew = 0, "", asyncio.Event()

        def progress(count: int, so_far: str) -> None:
            nonlocal tokens, text
            tokens, text = count, so_far
            grew.set()

        # One request id per attempt: a retry must not collide with an aborted earlier attempt.
        attempt = activity.info().attempt
        request_id = f"{request.trace_id}-{attempt}"
        stream = self._stream(request, attempt)
        task = asyncio.ensure_future(
            self.engine.generate(
                messages, request.max_tokens, request_id, progress, request.sampling
            )
        )
        try:
            with prompt_errors():
                while not task.done():
                    activity.heartbeat(tokens)
                    if stream is not None:
                        if await stream.send(text):
                            # Tokens batch up for STREAM_EVERY_SECONDS after each send; the
                            # first token goes out as soon as it exists (time to first token).
                            await asyncio.wait({task}, timeout=STREAM_EVERY_SECONDS)
                            continue
                        grew.clear()
                        changed = asyncio.ensure_future(grew.wait())
                        await asyncio.wait(
                            {task, changed},
                            timeout=HEARTBEAT_EVERY_SECONDS,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                        changed.cancel()
                    else:
                        await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS)
                result = task.result()
        except asyncio.CancelledError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise
        if stream is not None:
            await stream.send(result.text, end=True)
        observe("generate", result, request.trace_id)
        activity.logger.info(
            "generated %d tokens (prompt %d) with %s in %.2f s, first token after %.2f s",
            result.completion_tokens,
            result.prompt_tokens,
            result.model,
            result.seconds,
            result.first_token_seconds,
        )
        return GenerateOutput(
            text=result.text,
            model=result.model,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            finish_reason=result.finish_reason,
            seconds=result.seconds,
            first_token_seconds=result.first_token_seconds,
        )

    async def _short(
        self, step: str, messages: list[dict[str, str]], max_tokens: int, request_id: str
    ) -> Generation:
        """A short generation (a rewrite, a summary): a few tokens, so no heartbeat is needed; a
        cancelled activity cancels the engine call, which aborts the request."""
        parameters: dict[str, object] = {"max_tokens": max_tokens}
        with llm_step(step, self.engine.model_name, messages, parameters), prompt_errors():
            result = await self.engine.generate(messages, max_tokens, request_id)
            observe(step, result)
        return result

    @activity.defn
    async def rewrite_query(self, request: RewriteInput) -> RewriteOutput:
        """Rewrite a question into a search query."""
        messages = [
            {"role": "system", "content": REWRITE_PROMPT},
            {"role": "user", "content": request.question},
        ]
        request_id = f"{request.trace_id}-rewrite-{activity.info().attempt}"
        result = await self._short("rewrite", messages, request.max_tokens, request_id)
        return RewriteOutput(
            query=clean_rewrite(result.text, request.question),
            model=result.model,
            seconds=result.seconds,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
        )

    @activity.defn
    async def summarize(self, request: SummarizeInput) -> SummarizeOutput:
        """Fold turns into a conversation's rolling summary."""
        transcript = "\n".join(f"{t.role}: {t.text}" for t in request.turns)
        previous = request.previous_summary or "(none)"
        messages = [
            {"role": "system", "content": SUMMARY_PROMPT},
            {
                "role": "user",
                "content": f"Summary so far:\n{previous}\n\nNew turns:\n{transcript}\n\n"
                "Updated summary:",
            },
        ]
        request_id = f"{request.trace_id}-summary-{activity.info().attempt}"
        parameters: dict[str, object] = {"max_tokens": request.max_tokens}
        with llm_step("summarize", self.engine.model_name, messages, parameters):
            return await self._summarize(messages, request.max_tokens, request_id)

    async def _summarize(
        self, messages: list[dict[str, str]], max_tokens: int, request_id: str
    ) -> SummarizeOutput:
        task = asyncio.ensure_future(self.engine.generate(messages, max_tokens, request_id))
        try:
            with prompt_errors():
                # Heartbeats while it runs: a summary on a busy CPU may take minutes.
                while not task.done():
                    activity.heartbeat()
                    await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS * 5)
                result = task.result()
        except asyncio.CancelledError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise
        observe("summarize", result)
        return SummarizeOutput(summary=result.text.strip(), model=result.model)
