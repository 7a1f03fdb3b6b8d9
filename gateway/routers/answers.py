"""Answers with citations: `/v1/ask`, and its Server-Sent Events stream."""

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from gateway.answering import answer_events, finish_answer, start_answer, start_streamed_answer
from gateway.deps import AppSettings, Listener, Rag, Tenant
from schemas.answer import Answer, AskRequest
from schemas.gateway import AskBody

router = APIRouter()


@router.post("/v1/ask", response_model=Answer)
async def ask(
    body: AskBody, request: Request, tenant: Tenant, rag: Rag, settings: AppSettings
) -> Answer:
    ask_request = AskRequest(tenant=tenant, **body.model_dump())
    handle = await start_answer(rag, ask_request, request.state.request_id)
    return await finish_answer(handle, settings.gateway.request_timeout_seconds)


@router.post(
    "/v1/ask/stream",
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
    handle, stream_id, queue = await start_streamed_answer(
        rag, listener, ask_request, request.state.request_id
    )
    timeout = settings.gateway.request_timeout_seconds
    return EventSourceResponse(answer_events(handle, stream_id, queue, listener, timeout))
