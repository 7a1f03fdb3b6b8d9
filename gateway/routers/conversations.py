"""Conversations: send a message (a turn, or its Server-Sent Events stream), read the history,
delete it. A turn is part of the conversation's record: a client that leaves does not stop it."""

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request
from sse_starlette import EventSourceResponse
from temporalio.client import WorkflowUpdateFailedError

from durable_rag.client import RagClient
from gateway.answering import open_stream
from gateway.deps import AppSettings, Listener, Rag, Tenant
from gateway.errors import error_event, http_error
from gateway.streams import Token, relay
from ragkit.streaming import TokenListener
from schemas.conversation import CONVERSATION_ID_PATTERN, ChatReply, ConversationHistory
from schemas.gateway import MessageBody

router = APIRouter()

ConversationIdPath = Annotated[str, Path(pattern=CONVERSATION_ID_PATTERN)]


def check_message(rag: RagClient, body: MessageBody) -> None:
    try:  # the same limits as ask, before anything starts
        rag.context_tokens(body.max_answer_tokens)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc


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
        message_id=body.message_id or request.state.request_id,
        top_k=body.top_k,
        max_answer_tokens=body.max_answer_tokens,
        stream_id=stream_id,
    )


@router.post("/v1/conversations/{conversation_id}/messages", response_model=ChatReply)
async def send_message(
    conversation_id: ConversationIdPath,
    body: MessageBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    settings: AppSettings,
) -> ChatReply:
    check_message(rag, body)
    timeout = settings.gateway.request_timeout_seconds
    try:
        return await asyncio.wait_for(
            send(rag, conversation_id, body, request, tenant), timeout=timeout
        )
    except TimeoutError as exc:
        raise HTTPException(
            504, f"no reply within {timeout:g} s; the turn goes on and its reply is stored"
        ) from exc
    except WorkflowUpdateFailedError as exc:
        raise http_error(exc) from exc


@router.post(
    "/v1/conversations/{conversation_id}/messages/stream",
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
    """Server-Sent Events: `token`..., then `reply` (the ChatReply) or `error`. A turn is
    part of the conversation's record: a client that leaves does not stop it, and its
    reply is stored (GET the conversation)."""
    check_message(rag, body)
    stream_id, queue = await open_stream(listener)
    # The turn is sent once the response starts streaming, as the events begin.
    reply = functools.partial(send, rag, conversation_id, body, request, tenant, stream_id)
    timeout = settings.gateway.request_timeout_seconds
    return EventSourceResponse(reply_events(reply, stream_id, queue, listener, timeout))


async def reply_events(
    reply: Callable[[], Awaitable[ChatReply]],
    stream_id: str,
    queue: asyncio.Queue[Any],
    listener: TokenListener,
    timeout: float,
) -> AsyncIterator[dict[str, str]]:
    result = asyncio.ensure_future(reply())
    try:
        async for item in relay(queue, result, timeout):
            if isinstance(item, Token):
                yield {"event": "token", "data": json.dumps({"text": item.text})}
            else:
                yield {"event": "reset", "data": json.dumps({"part": item.part})}
        yield {"event": "reply", "data": result.result().model_dump_json()}
    except TimeoutError:
        yield error_event(504, f"no reply within {timeout:g} s; the turn goes on")
    except WorkflowUpdateFailedError as exc:
        error = http_error(exc)
        yield error_event(error.status_code, str(error.detail))
    finally:
        listener.close_stream(stream_id)
        result.cancel()


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
