"""Conversations: send a message (a turn, or its Server-Sent Events stream), read the history,
delete it.

A message is admitted at the door like an answer (429 with Retry-After, nothing started). A client that
leaves, or a turn past the access timeout, stops the turn (`RagClient.cancel_turn`): its answer
and generation are cancelled, the user turn stays stored and no assistant turn is; a retry with
the same message id gets 409, a new message id asks again."""

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request
from sse_starlette import EventSourceResponse
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from durable_rag.client import RagClient
from gateway.answering import (
    CLIENT_LEFT,
    ClientLeft,
    admitted,
    deadline_of,
    open_stream,
    plain_turn,
    prompt_tokens,
    released,
    take_turn,
    until_done,
)
from gateway.deps import AppSettings, Listener, Rag, Tenant
from gateway.door import Cost, LiveRoute
from gateway.errors import http_error, stream_error
from gateway.streams import Deadline, in_background, text_events
from ragkit.metrics import ANSWER_TIMEOUTS
from ragkit.settings import Settings
from ragkit.streaming import TokenListener
from schemas.conversation import CONVERSATION_ID_PATTERN, ChatReply, ConversationHistory
from schemas.gateway import MessageBody

router = APIRouter()
log = logging.getLogger("durable_rag.gateway")
TURN = "/v1/conversations/{conversation_id}/messages"
TURN_STREAM = "/v1/conversations/{conversation_id}/messages/stream"

ConversationIdPath = Annotated[str, Path(pattern=CONVERSATION_ID_PATTERN)]


def check_message(rag: RagClient, body: MessageBody) -> None:
    try:  # the same limits as ask, before anything starts
        rag.context_tokens(body.max_answer_tokens)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc


def cost(body: MessageBody, settings: Settings) -> Cost:
    """A turn's own prompt tokens, as admission counts them: its message and, at most, the
    conversation's history budget (stored, so unknown here until the turn reads it)."""
    prompt = prompt_tokens(body.message) + settings.conversation.history_tokens
    return Cost(None, body.max_answer_tokens, prompt)


LIVE = [LiveRoute(TURN, MessageBody, cost), LiveRoute(TURN_STREAM, MessageBody, cost)]


def message_id(body: MessageBody, request: Request) -> str:
    return body.message_id or request.state.request_id


def send(
    rag: RagClient,
    conversation_id: str,
    body: MessageBody,
    request: Request,
    tenant: str,
    stream_id: str = "",
) -> Awaitable[ChatReply]:
    return rag.chat(
        conversation_id,
        body.message,
        tenant=tenant,
        message_id=message_id(body, request),
        top_k=body.top_k,
        max_answer_tokens=body.max_answer_tokens,
        stream_id=stream_id,
    )


async def stop_turn(
    rag: RagClient, conversation_id: str, tenant: str, message: str, why: str
) -> None:
    """Cancel the turn of `message`, so its generation stops."""
    try:
        running = await rag.cancel_turn(conversation_id, tenant, message)
        log.info("stopped the turn of %s in %s (%s): %s", message, conversation_id, running, why)
    except RPCError as exc:
        log.warning("could not stop the turn of %s in %s: %s", message, conversation_id, exc)


@router.post(TURN, response_model=ChatReply)
async def send_message(
    conversation_id: ConversationIdPath,
    body: MessageBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    listener: Listener,
    settings: AppSettings,
) -> ChatReply:
    """The reply. A client that leaves before it comes, or the access timeout, stops the turn."""
    check_message(rag, body)
    deadline = deadline_of(request, settings)
    stop = functools.partial(stop_turn, rag, conversation_id, tenant, message_id(body, request))
    with await admitted(request, cost(body, settings)) as ticket:
        try:
            async with plain_turn(request, ticket, deadline, listener) as stream_id:
                return await until_done(
                    send(rag, conversation_id, body, request, tenant, stream_id),
                    request,
                    deadline.left(),
                )
        except TimeoutError as exc:
            ANSWER_TIMEOUTS.labels("turn").inc()
            await stop(f"no reply within {deadline.said}")
            raise HTTPException(
                504, f"no reply within {deadline.said}; the turn was cancelled"
            ) from exc
        except ClientLeft as exc:
            await stop("the client left")
            raise HTTPException(CLIENT_LEFT, "the client left; the turn was cancelled") from exc
        except WorkflowUpdateFailedError as exc:
            raise http_error(exc) from exc


@router.post(
    TURN_STREAM,
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def send_message_stream(
    conversation_id: ConversationIdPath,
    body: MessageBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    listener: Listener,
    settings: AppSettings,
) -> EventSourceResponse:
    """Server-Sent Events: `token`..., then `reply` (the ChatReply) or `error`. A client that
    leaves stops the turn (its user turn stays stored, no reply is)."""
    check_message(rag, body)
    deadline = deadline_of(request, settings)
    ticket = await admitted(request, cost(body, settings))
    try:
        await take_turn(request, ticket, deadline)
        stream_id, queue = await open_stream(listener)
    except BaseException:
        ticket.release()
        raise
    # The turn is sent once the response starts streaming, as the events begin.
    reply = functools.partial(send, rag, conversation_id, body, request, tenant, stream_id)
    stop = functools.partial(stop_turn, rag, conversation_id, tenant, message_id(body, request))
    events = reply_events(reply, stop, stream_id, queue, listener, deadline, ticket.streaming)
    return released(events, ticket)


async def reply_events(
    reply: Callable[[], Awaitable[ChatReply]],
    stop: Callable[[str], Coroutine[Any, Any, None]],
    stream_id: str,
    queue: asyncio.Queue[Any],
    listener: TokenListener,
    deadline: Deadline,
    on_text: Callable[[], None] | None = None,
) -> AsyncGenerator[dict[str, str], None]:
    result = asyncio.ensure_future(reply())
    ended = False  # the turn is over: replied or failed
    try:
        async for event in text_events(queue, result, deadline, on_text):
            yield event
        chat_reply = result.result()
        ended = True
        yield {"event": "reply", "data": chat_reply.model_dump_json()}
    except TimeoutError:
        ANSWER_TIMEOUTS.labels("turn_stream").inc()
        yield stream_error(
            TURN_STREAM, 504, f"no reply within {deadline.said}; the turn was cancelled"
        )
    except WorkflowUpdateFailedError as exc:
        ended = True
        error = http_error(exc)
        yield stream_error(TURN_STREAM, error.status_code, str(error.detail))
    except Exception as exc:  # after the 200: the client learns it from this event alone
        log.exception("a conversation stream failed")
        yield stream_error(TURN_STREAM, 502, f"the stream failed: {exc}")
    finally:
        listener.close_stream(stream_id)
        result.cancel()
        if not ended:  # in a task of its own: this cleanup may itself be cancelled
            in_background(stop("the client left or the reply timed out"))


@router.get("/v1/conversations/{conversation_id}", response_model=ConversationHistory)
async def get_conversation(
    conversation_id: ConversationIdPath, tenant: Tenant, rag: Rag
) -> ConversationHistory:
    stored = await rag.history(conversation_id, tenant)
    if stored is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return stored


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(
    conversation_id: ConversationIdPath, tenant: Tenant, rag: Rag
) -> dict[str, int]:
    return {"deleted_turns": await rag.delete_conversation(conversation_id, tenant)}
