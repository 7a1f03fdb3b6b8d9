"""Answers with citations: `/v1/ask`, and its Server-Sent Events stream.

Both are admitted first (429 with Retry-After when the model is full, nothing started), and
both cancel the answer's run when the client leaves or the access timeout passes. The stream
also waits its turn in the model's start window before its run starts (ragkit/admission.py)."""

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from gateway.answering import (
    ASK_STREAM,
    admit,
    answer_events,
    deadline_of,
    finish_answer,
    prompt_tokens,
    released,
    start_answer,
    start_streamed_answer,
    take_turn,
)
from gateway.deps import Admit, AppSettings, Listener, Rag, Tenant
from schemas.answer import Answer, AskRequest
from schemas.gateway import AskBody

router = APIRouter()


@router.post("/v1/ask", response_model=Answer)
async def ask(
    body: AskBody,
    request: Request,
    tenant: Tenant,
    rag: Rag,
    settings: AppSettings,
    admission: Admit,
) -> Answer:
    """The answer (citations, timings, degradations). A client that leaves before it is done
    cancels it, and generation stops."""
    ask_request = AskRequest(tenant=tenant, **body.model_dump())
    deadline = deadline_of(request, settings)
    tokens, prompt = ask_request.max_answer_tokens, prompt_tokens(body.question)
    with await admit(request, admission, rag, body.model, tokens, prompt) as ticket:
        handle = await start_answer(
            rag, ask_request, request.state.request_key, model=ticket.model, request=request
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
    admission: Admit,
) -> EventSourceResponse:
    """Server-Sent Events: `start`, `token`..., then `answer` (citations, timings,
    degradations) or `error`. Leaving early cancels the answer."""
    ask_request = AskRequest(tenant=tenant, **body.model_dump())
    deadline = deadline_of(request, settings)
    tokens, prompt = ask_request.max_answer_tokens, prompt_tokens(body.question)
    ticket = await admit(request, admission, rag, body.model, tokens, prompt)
    try:
        await take_turn(request, ticket, deadline)
        handle, stream_id, queue = await start_streamed_answer(
            rag,
            listener,
            ask_request,
            request.state.request_key,
            model=ticket.model,
            request=request,
        )
    except BaseException:
        ticket.release()
        raise
    events = answer_events(handle, stream_id, queue, listener, deadline, ticket.streaming)
    return released(events, ticket)
