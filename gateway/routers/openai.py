"""OpenAI compatibility: `/v1/models` and `/v1/chat/completions` (plain or streamed), answered
by the answer flow. The request and response shapes are `gateway.openai_compat`'s. Completions
are admitted at the door like `/v1/ask` (429 with Retry-After, OpenAI's error shape), and a client that
leaves or times out cancels its answer."""

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from sse_starlette import EventSourceResponse
from temporalio.client import WorkflowFailureError, WorkflowHandle

from gateway import openai_compat
from gateway.answering import (
    admitted,
    cancel_later,
    deadline_of,
    finish_answer,
    plain_turn,
    prompt_tokens,
    released,
    start_answer,
    start_streamed_answer,
    take_turn,
)
from gateway.deps import AppSettings, Listener, Rag, Tenant
from gateway.door import Cost, LiveRoute
from gateway.errors import http_error, stream_failed
from gateway.streams import Deadline, Reset, Token, relay
from ragkit.metrics import ANSWER_TIMEOUTS
from ragkit.settings import Settings
from ragkit.streaming import TokenListener
from schemas.answer import Answer, AskRequest, ConversationWindow
from schemas.gateway import ChatCompletionBody

router = APIRouter()
log = logging.getLogger("durable_rag.gateway")
COMPLETIONS = "/v1/chat/completions"


def read(
    body: ChatCompletionBody, tenant: str, settings: Settings
) -> tuple[AskRequest, ConversationWindow | None]:
    """The question (with the model to prefer) and the history; LookupError for a model not
    served, ValueError for no question."""
    model = openai_compat.resolve_model(body.model, settings)
    return openai_compat.to_ask(body, tenant, model, settings.conversation.history_tokens)


def cost(body: ChatCompletionBody, settings: Settings) -> Cost:
    ask_request, history = read(body, settings.default_tenant, settings)
    brought = [ask_request.question, *(turn.content for turn in (history.turns if history else []))]
    return Cost(ask_request.model, ask_request.max_answer_tokens, prompt_tokens(*brought))


LIVE = [LiveRoute(COMPLETIONS, ChatCompletionBody, cost)]


@router.get("/v1/models")
async def models(_: Tenant, settings: AppSettings) -> dict[str, Any]:
    return openai_compat.model_list(settings)


@router.post(COMPLETIONS, response_model=None)
async def chat_completions(
    body: ChatCompletionBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    listener: Listener,
    settings: AppSettings,
) -> dict[str, Any] | EventSourceResponse:
    """OpenAI's chat completions, answered with retrieval: the last message is the
    question, earlier user and assistant messages are the conversation so far. The answer's
    citations come as an extra `citations` field."""
    try:
        ask_request, history = read(body, tenant, settings)
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    request_key = request.state.request_key
    deadline = deadline_of(request, settings)
    ticket = await admitted(request, cost(body, settings))
    if not body.stream:
        with ticket:
            async with plain_turn(request, ticket, deadline, listener) as stream_id:
                handle = await start_answer(
                    rag, ask_request, request_key, stream_id, history, request
                )
                answer = await finish_answer(handle, deadline, request)
        return openai_compat.completion(answer, body.model)
    try:
        await take_turn(request, ticket, deadline)
        handle, stream_id, queue = await start_streamed_answer(
            rag, listener, ask_request, request_key, history, request
        )
    except BaseException:
        ticket.release()
        raise
    events = chunks(handle, body, stream_id, queue, listener, deadline, ticket.streaming)
    return released(events, ticket)


async def chunks(
    handle: WorkflowHandle[Any, Answer],
    body: ChatCompletionBody,
    stream_id: str,
    queue: asyncio.Queue[Any],
    listener: TokenListener,
    deadline: Deadline,
    on_text: Callable[[], None] | None = None,
) -> AsyncGenerator[dict[str, str], None]:
    """`chat.completion.chunk` events, then `[DONE]`; past the deadline, OpenAI's error chunk
    (a 504) before it. A client that leaves cancels the workflow."""
    chunker = openai_compat.Chunker(handle.id, body.model)
    result = asyncio.ensure_future(handle.result())
    closed = False
    try:
        yield {"data": chunker.first()}
        async for item in relay(queue, result, deadline, on_text):
            if isinstance(item, Token):
                yield {"data": chunker.text(item.text)}
            elif isinstance(item, Reset):
                chunker.reset()
        answer = result.result()
        closed = True
        for data in chunker.finish(
            answer,
            include_usage=bool(body.stream_options and body.stream_options.include_usage),
        ):
            yield {"data": data}
    except TimeoutError:
        ANSWER_TIMEOUTS.labels("answer_stream").inc()
        stream_failed(COMPLETIONS, 504)
        yield {"data": openai_compat.error(504, f"no answer within {deadline.said}")}
    except WorkflowFailureError as exc:
        closed = True
        error = http_error(exc)
        stream_failed(COMPLETIONS, error.status_code)
        yield {"data": openai_compat.error(error.status_code, str(error.detail))}
    except Exception as exc:  # after the 200: the client learns it from this event alone
        log.exception("the completion stream of %s failed", handle.id)
        stream_failed(COMPLETIONS, 502)
        yield {"data": openai_compat.error(502, f"the stream failed: {exc}")}
    finally:
        listener.close_stream(stream_id)
        result.cancel()
        if not closed:
            cancel_later(handle, "the client left or the answer timed out")
    yield {"data": "[DONE]"}
