"""Answers with citations: `/v1/ask`, and its Server-Sent Events stream.

Both are admitted first, at the door (429 with Retry-After when the model is full, nothing
started: gateway/door.py), and
both cancel the answer's run when the client leaves or the access timeout passes. The stream
also waits its turn in the model's start window before its run starts (ragkit/admission.py)."""

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from gateway.answering import (
    ASK_STREAM,
    admitted,
    answer_events,
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
from ragkit.settings import Settings
from schemas.answer import Answer, AskRequest
from schemas.gateway import AskBody

router = APIRouter()


def cost(body: AskBody, settings: Settings) -> Cost:
    return Cost(body.model, body.max_answer_tokens, prompt_tokens(body.question))


LIVE = [LiveRoute("/v1/ask", AskBody, cost), LiveRoute(ASK_STREAM, AskBody, cost)]


@router.post("/v1/ask", response_model=Answer)
async def ask(
    body: AskBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    listener: Listener,
    settings: AppSettings,
) -> Answer:
    """The answer (citations, timings, degradations). A client that leaves before it is done
    cancels it, and generation stops."""
    ask_request = AskRequest(tenant=tenant, **body.model_dump())
    deadline = deadline_of(request, settings)
    with await admitted(request, cost(body, settings)) as ticket:
        async with plain_turn(request, ticket, deadline, listener) as stream_id:
            handle = await start_answer(
                rag,
                ask_request,
                request.state.request_key,
                stream_id,
                request=request,
            )
            return await finish_answer(handle, deadline, request)


@router.post(
    ASK_STREAM,
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def ask_stream(
    body: AskBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    listener: Listener,
    settings: AppSettings,
) -> EventSourceResponse:
    """Server-Sent Events: `start`, `token`..., then `answer` (citations, timings,
    degradations) or `error`. Leaving early cancels the answer."""
    ask_request = AskRequest(tenant=tenant, **body.model_dump())
    deadline = deadline_of(request, settings)
    ticket = await admitted(request, cost(body, settings))
    try:
        await take_turn(request, ticket, deadline)
        handle, stream_id, queue = await start_streamed_answer(
            rag,
            listener,
            ask_request,
            request.state.request_key,
            request=request,
        )
    except BaseException:
        ticket.release()
        raise
    events = answer_events(handle, stream_id, queue, listener, deadline, ticket.streaming)
    return released(events, ticket)
