"""HTTP gateway (R4-R7): a thin process that starts workflows and holds no state of its own.

Every endpoint but the health checks needs an API key (`Authorization: Bearer drk_...` or
`X-API-Key`); the key decides the tenant, never the body. `X-Request-ID` is accepted (or made)
and becomes the trace id and the workflow id. Invalid input gets a 4xx and starts nothing.

Streaming endpoints (`/v1/ask/stream`, `.../messages/stream`, `/v1/chat/completions` with
`stream`) relay the generation's text from Postgres LISTEN/NOTIFY (ragkit/streaming.py) as
Server-Sent Events. A client that leaves mid-answer gets its answer workflow cancelled, and the
cancellation reaches the engine (R6).

    durable-rag gateway            # uvicorn on settings.gateway_host:gateway_port
"""

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import (
    Depends,
    FastAPI,
    File,
    Form,
    Header,
    HTTPException,
    Path,
    Request,
    Response,
    UploadFile,
)
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from sqlalchemy import text
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durable_rag.client import IdempotencyConflict, RagClient, failure_cause
from gateway import openai_compat
from gateway.streams import Reset, Token, in_background, relay
from ragkit import policies
from ragkit.db import make_sessionmaker
from ragkit.logs import TRACE_ID
from ragkit.metrics import ANSWER_TIMEOUTS, HTTP_REQUESTS, HTTP_SECONDS
from ragkit.settings import Settings
from ragkit.store import feedback, keys
from ragkit.streaming import TokenListener
from ragkit.temporal import queue_has_poller
from schemas.answer import Answer, AskRequest
from schemas.conversation import CONVERSATION_ID_PATTERN, ChatReply, ConversationHistory
from schemas.documents import DocumentDeleted
from schemas.gateway import (
    AskBody,
    ChatCompletionBody,
    DocumentAccepted,
    DocumentBody,
    FeedbackBody,
    FeedbackRecorded,
    MessageBody,
    Readiness,
    RunStatus,
)

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at
# runtime, and those built inside create_app (the tenant dependency) must resolve there.
log = logging.getLogger("durable_rag.gateway")
REQUEST_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# Causes that are the caller's fault: 422 with the message, not 5xx.
CALLER_ERRORS = {policies.INVALID_INPUT, policies.PROMPT_TOO_LONG}

IdempotencyKey = Annotated[
    str | None,
    Header(
        pattern=r"^[A-Za-z0-9_.:-]{1,128}$",
        description="A retried POST with the same key starts nothing new.",
    ),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class RequestId:
    """X-Request-ID in (or a new one), on the response, in the trace id of every log line of
    the request, and one access log line at the end. Plain ASGI: a streamed response passes
    through untouched, and a client's disconnect reaches the endpoint."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        token = TRACE_ID.set(request_id)
        started, status = time.perf_counter(), 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            # The route's template, not the path: labels stay bounded (no ids in them).
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            HTTP_REQUESTS.labels(route, scope["method"], str(status or 0)).inc()
            # The trace id rides as an exemplar (OpenMetrics), never as a label.
            HTTP_SECONDS.labels(route).observe(seconds, exemplar={"trace_id": request_id[:64]})
            log.info(
                "%s %s %s %.0f ms", scope["method"], scope["path"], status or "-", seconds * 1000
            )
            TRACE_ID.reset(token)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """413 for a body over the limit, whether it declares its length or streams chunks."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = JSONResponse(
            {"detail": f"request body is over the limit of {self.limit} bytes"}, status_code=413
        )
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await too_large(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await too_large(scope, receive, send)


def create_app(settings: Settings, rag: RagClient | None = None) -> FastAPI:
    sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    listener = TokenListener(settings.postgres.sqlalchemy_url)
    timeout = settings.gateway.request_timeout_seconds
    holder: dict[str, RagClient] = {}
    if rag is not None:
        holder["rag"] = rag

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not settings.gateway.auth:
            log.warning(
                "AUTHENTICATION IS OFF (DURABLE_RAG_GATEWAY_AUTH=false): anyone who can reach "
                "this port acts as tenant %r",
                settings.default_tenant,
            )
        if "rag" not in holder:
            holder["rag"] = await RagClient.connect(settings, sessions)
        yield
        await listener.close()
        sessions.kw["bind"].dispose()

    app = FastAPI(
        title="durable-rag gateway",
        version="0.1.0",
        description="Answers with citations, conversations, documents and run status over "
        "Temporal flows; an OpenAI-compatible chat completions endpoint.",
        lifespan=lifespan,
    )

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path in openai_compat.PATHS:  # OpenAI clients read error.message
            return JSONResponse(
                json.loads(openai_compat.error(exc.status_code, str(exc.detail))),
                status_code=exc.status_code,
                headers=exc.headers,
            )
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
        if request.url.path in openai_compat.PATHS:
            message = "; ".join(
                f"{'.'.join(str(part) for part in e['loc'][1:]) or 'body'}: {e['msg']}"
                for e in exc.errors()
            )
            return JSONResponse(json.loads(openai_compat.error(422, message)), status_code=422)
        return await request_validation_exception_handler(request, exc)

    def client() -> RagClient:
        return holder["rag"]

    def tenant(
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> str:
        if not settings.gateway.auth:
            return settings.default_tenant
        key = x_api_key
        if key is None and authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        if not key:
            raise HTTPException(
                401,
                "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        found = keys.tenant_for(sessions, key)
        if found is None:
            raise HTTPException(401, "invalid or revoked API key")
        return found

    Tenant = Annotated[str, Depends(tenant)]
    ConversationIdPath = Annotated[str, Path(pattern=CONVERSATION_ID_PATTERN)]

    async def start_answer(
        ask_request: AskRequest,
        trace_id: str,
        stream_id: str = "",
        history: Any = None,
    ) -> WorkflowHandle[Any, Answer]:
        try:
            return await client().start_ask(
                ask_request, trace_id=trace_id, stream_id=stream_id, history=history
            )
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        except RPCError as exc:
            raise HTTPException(409, f"request id already used: {exc.message}") from exc

    async def finish_answer(handle: WorkflowHandle[Any, Answer]) -> Answer:
        try:
            return await asyncio.wait_for(handle.result(), timeout=timeout)
        except TimeoutError as exc:
            ANSWER_TIMEOUTS.labels("answer").inc()
            await handle.cancel()  # never leave an abandoned answer running
            raise HTTPException(504, f"no answer within {timeout:g} s") from exc
        except WorkflowFailureError as exc:
            raise _http_error(exc) from exc

    async def open_stream() -> tuple[str, asyncio.Queue[Any]]:
        stream_id = uuid.uuid4().hex
        try:
            return stream_id, await listener.open(stream_id)
        except Exception as exc:
            log.error("token stream unavailable: %s", exc)
            raise HTTPException(503, "streaming is unavailable: cannot LISTEN on Postgres") from exc

    def cancel_later(handle: WorkflowHandle[Any, Any], why: str) -> None:
        async def cancel() -> None:
            try:
                await handle.cancel()
                log.info("cancelled %s: %s", handle.id, why)
            except RPCError as exc:
                log.warning("could not cancel %s: %s", handle.id, exc)

        in_background(cancel())

    async def answer_events(
        handle: WorkflowHandle[Any, Answer], stream_id: str, queue: asyncio.Queue[Any]
    ) -> AsyncIterator[dict[str, str]]:
        """`start`, then `token` (text) and `reset` (start over) events, then `answer` (the
        whole Answer) or `error`. A client that leaves cancels the workflow."""
        result = asyncio.ensure_future(handle.result())
        closed = False
        try:
            yield {"event": "start", "data": json.dumps({"trace_id": handle.id})}
            async for item in relay(queue, result, timeout):
                if isinstance(item, Token):
                    yield {"event": "token", "data": json.dumps({"text": item.text})}
                else:
                    yield {"event": "reset", "data": json.dumps({"part": item.part})}
            answer = result.result()
            closed = True
            yield {"event": "answer", "data": answer.model_dump_json()}
        except TimeoutError:
            ANSWER_TIMEOUTS.labels("answer_stream").inc()
            yield _error_event(504, f"no answer within {timeout:g} s; the run was cancelled")
        except WorkflowFailureError as exc:
            closed = True
            error = _http_error(exc)
            yield _error_event(error.status_code, str(error.detail))
        finally:
            listener.close_stream(stream_id)
            result.cancel()
            if not closed:
                cancel_later(handle, "the client left or the answer timed out")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=Readiness)
    async def readyz(response: Response) -> Readiness:
        checks = await readiness(settings, sessions, client())
        ready = all(v == "ok" for v in checks.values())
        response.status_code = 200 if ready else 503
        return Readiness(ready=ready, checks=checks)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        # Prometheus asks for OpenMetrics, which carries the exemplars; others get plain text.
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(REGISTRY), media_type=content_type)

    # --- answers --------------------------------------------------------------------------------

    @app.post("/v1/ask", response_model=Answer)
    async def ask(body: AskBody, request: Request, tenant: Tenant) -> Answer:
        ask_request = AskRequest(tenant=tenant, **body.model_dump())
        handle = await start_answer(ask_request, request.state.request_id)
        return await finish_answer(handle)

    @app.post(
        "/v1/ask/stream",
        response_class=EventSourceResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def ask_stream(body: AskBody, request: Request, tenant: Tenant) -> EventSourceResponse:
        """Server-Sent Events: `start`, `token`..., then `answer` (citations, timings,
        degradations) or `error`. Leaving early cancels the answer."""
        ask_request = AskRequest(tenant=tenant, **body.model_dump())
        stream_id, queue = await open_stream()
        try:
            handle = await start_answer(ask_request, request.state.request_id, stream_id)
        except BaseException:
            listener.close_stream(stream_id)
            raise
        return EventSourceResponse(answer_events(handle, stream_id, queue))

    # --- conversations --------------------------------------------------------------------------

    def check_message(body: MessageBody, tenant: str) -> None:
        try:  # the same limits as ask, before anything starts
            client().context_tokens(body.max_answer_tokens)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc

    def send(
        conversation_id: str, body: MessageBody, request: Request, tenant: str, stream_id: str = ""
    ) -> Awaitable[ChatReply]:
        return client().chat(
            conversation_id,
            body.message,
            tenant=tenant,
            message_id=body.message_id or request.state.request_id,
            top_k=body.top_k,
            max_answer_tokens=body.max_answer_tokens,
            stream_id=stream_id,
        )

    @app.post("/v1/conversations/{conversation_id}/messages", response_model=ChatReply)
    async def send_message(
        conversation_id: ConversationIdPath, body: MessageBody, request: Request, tenant: Tenant
    ) -> ChatReply:
        check_message(body, tenant)
        try:
            return await asyncio.wait_for(
                send(conversation_id, body, request, tenant), timeout=timeout
            )
        except TimeoutError as exc:
            raise HTTPException(
                504, f"no reply within {timeout:g} s; the turn goes on and its reply is stored"
            ) from exc
        except WorkflowUpdateFailedError as exc:
            raise _http_error(exc) from exc

    @app.post(
        "/v1/conversations/{conversation_id}/messages/stream",
        response_class=EventSourceResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def send_message_stream(
        conversation_id: ConversationIdPath, body: MessageBody, request: Request, tenant: Tenant
    ) -> EventSourceResponse:
        """Server-Sent Events: `token`..., then `reply` (the ChatReply) or `error`. A turn is
        part of the conversation's record: a client that leaves does not stop it, and its
        reply is stored (GET the conversation)."""
        check_message(body, tenant)
        stream_id, queue = await open_stream()

        async def events() -> AsyncIterator[dict[str, str]]:
            result = asyncio.ensure_future(send(conversation_id, body, request, tenant, stream_id))
            try:
                async for item in relay(queue, result, timeout):
                    if isinstance(item, Token):
                        yield {"event": "token", "data": json.dumps({"text": item.text})}
                    else:
                        yield {"event": "reset", "data": json.dumps({"part": item.part})}
                yield {"event": "reply", "data": result.result().model_dump_json()}
            except TimeoutError:
                yield _error_event(504, f"no reply within {timeout:g} s; the turn goes on")
            except WorkflowUpdateFailedError as exc:
                error = _http_error(exc)
                yield _error_event(error.status_code, str(error.detail))
            finally:
                listener.close_stream(stream_id)
                result.cancel()

        return EventSourceResponse(events())

    @app.get("/v1/conversations/{conversation_id}", response_model=ConversationHistory)
    async def get_conversation(
        conversation_id: ConversationIdPath, tenant: Tenant
    ) -> ConversationHistory:
        stored = await client().history(conversation_id, tenant)
        if stored is None:
            raise HTTPException(404, f"no conversation {conversation_id!r}")
        return stored

    @app.delete("/v1/conversations/{conversation_id}")
    async def delete_conversation(
        conversation_id: ConversationIdPath, tenant: Tenant
    ) -> dict[str, int]:
        return {"deleted_turns": await client().delete_conversation(conversation_id, tenant)}

    # --- OpenAI-compatible ----------------------------------------------------------------------

    @app.get("/v1/models")
    async def models(_: Tenant) -> dict[str, Any]:
        return openai_compat.model_list(settings)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(
        body: ChatCompletionBody, request: Request, tenant: Tenant
    ) -> dict[str, Any] | EventSourceResponse:
        """OpenAI's chat completions, answered with retrieval: the last message is the
        question, earlier user and assistant messages are the conversation so far. The answer's
        citations come as an extra `citations` field."""
        try:
            model = openai_compat.resolve_model(body.model, settings)
            ask_request, history = openai_compat.to_ask(
                body, tenant, model, settings.conversation.history_tokens
            )
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        trace_id = request.state.request_id
        if not body.stream:
            handle = await start_answer(ask_request, trace_id, history=history)
            return openai_compat.completion(await finish_answer(handle), body.model)
        stream_id, queue = await open_stream()
        try:
            handle = await start_answer(ask_request, trace_id, stream_id, history)
        except BaseException:
            listener.close_stream(stream_id)
            raise

        async def chunks() -> AsyncIterator[dict[str, str]]:
            chunker = openai_compat.Chunker(handle.id, body.model)
            result = asyncio.ensure_future(handle.result())
            closed = False
            try:
                yield {"data": chunker.first()}
                async for item in relay(queue, result, timeout):
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
                yield {"data": openai_compat.error(504, f"no answer within {timeout:g} s")}
            except WorkflowFailureError as exc:
                closed = True
                error = _http_error(exc)
                yield {"data": openai_compat.error(error.status_code, str(error.detail))}
            finally:
                listener.close_stream(stream_id)
                result.cancel()
                if not closed:
                    cancel_later(handle, "the client left or the answer timed out")
            yield {"data": "[DONE]"}

        return EventSourceResponse(chunks())

    # --- documents ------------------------------------------------------------------------------

    @app.post("/v1/documents", response_model=DocumentAccepted, status_code=202)
    async def post_document(
        body: DocumentBody, tenant: Tenant, idempotency_key: IdempotencyKey = None
    ) -> DocumentAccepted:
        """Ingest a document sent as text. The name is its identity: the same name again
        replaces it. With an `Idempotency-Key`, a retried POST starts nothing new."""
        return await accept_document(tenant, body.name, body.text.encode(), idempotency_key)

    @app.post("/v1/documents/upload", response_model=DocumentAccepted, status_code=202)
    async def upload_document(
        file: Annotated[UploadFile, File(description="A .md, .txt or .html file.")],
        tenant: Tenant,
        idempotency_key: IdempotencyKey = None,
        name: Annotated[str | None, Form(max_length=200)] = None,
    ) -> DocumentAccepted:
        """Ingest an uploaded file (multipart/form-data, field `file`; `name` overrides the
        file's name)."""
        data = await file.read()
        try:
            checked = DocumentBody(name=name or file.filename or "", text="-")
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        if not data:
            raise HTTPException(422, "the uploaded file is empty")
        return await accept_document(tenant, checked.name, data, idempotency_key)

    async def accept_document(
        tenant: str, name: str, data: bytes, idempotency_key: str | None
    ) -> DocumentAccepted:
        try:
            return await client().ingest_document(tenant, name, data, idempotency_key)
        except IdempotencyConflict as exc:
            raise HTTPException(409, str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc

    @app.delete("/v1/documents/{document_id}", response_model=DocumentDeleted)
    async def delete_document(document_id: uuid.UUID, tenant: Tenant) -> DocumentDeleted:
        """Delete a document: from the moment this returns, no retrieval path sees it."""
        try:
            return await asyncio.wait_for(
                client().delete_document(document_id, tenant), timeout=timeout
            )
        except TimeoutError as exc:
            raise HTTPException(504, f"the delete did not finish within {timeout:g} s") from exc
        except WorkflowFailureError as exc:
            cause = failure_cause(exc)
            if isinstance(cause, ApplicationError) and cause.type == policies.NOT_FOUND:
                raise HTTPException(404, f"no document {document_id}") from exc
            raise _http_error(exc) from exc

    # --- feedback -------------------------------------------------------------------------------

    @app.post("/v1/feedback", response_model=FeedbackRecorded)
    async def post_feedback(body: FeedbackBody, tenant: Tenant) -> FeedbackRecorded:
        """Thumbs up or down on an answer, by the trace id it came back with. The latest vote
        counts."""
        try:
            replaced = await asyncio.to_thread(
                feedback.record, sessions, tenant, body.trace_id, body.rating, body.comment
            )
        except feedback.UnknownAnswer as exc:
            raise HTTPException(404, str(exc)) from exc
        return FeedbackRecorded(trace_id=body.trace_id, rating=body.rating, replaced=replaced)

    # --- runs -----------------------------------------------------------------------------------

    @app.get("/v1/runs/{workflow_id}", response_model=RunStatus)
    async def run_status(
        workflow_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,256}$")], tenant: Tenant
    ) -> RunStatus:
        handle = client().client.get_workflow_handle(workflow_id)
        try:
            described = await handle.describe()
            memo = await described.memo()
        except RPCError as exc:
            raise HTTPException(404, f"no run {workflow_id!r}") from exc
        if memo.get("tenant") != tenant:  # another tenant's run does not exist for this caller
            raise HTTPException(404, f"no run {workflow_id!r}")
        return RunStatus(
            workflow_id=described.id,
            run_id=described.run_id,
            workflow_type=described.workflow_type,
            status=(described.status or WorkflowExecutionStatus.RUNNING).name.lower(),
            started_at=described.start_time.isoformat() if described.start_time else None,
            closed_at=described.close_time.isoformat() if described.close_time else None,
        )

    app.state.token_listener = listener  # tests look at its subscribers
    return RequestId(BodyLimit(app, settings.gateway.max_body_bytes))  # type: ignore[return-value]


def _error_event(status: int, detail: str) -> dict[str, str]:
    return {"event": "error", "data": json.dumps({"status": status, "detail": detail})}


def _http_error(exc: BaseException) -> HTTPException:
    cause = failure_cause(exc)
    if isinstance(cause, ApplicationError) and cause.type in CALLER_ERRORS:
        return HTTPException(422, f"{cause.type}: {cause.message}")
    return HTTPException(502, f"the flow failed: {cause}")


async def readiness(settings: Settings, sessions: Any, rag: RagClient) -> dict[str, str]:
    """Ready: Postgres answers, and each queue the answer path needs has a poller (a worker
    polls only once its model is loaded)."""
    checks: dict[str, str] = {}
    try:
        with sessions() as session:
            session.execute(text("SELECT 1"))
        checks["postgres"] = "ok"
    except Exception as exc:
        checks["postgres"] = f"unreachable: {type(exc).__name__}"
    queues = {
        "orchestrator worker": settings.temporal.workflow_task_queue,
        "index worker": settings.temporal.index_task_queue,
        "llm worker": policies.llm_queue(settings.llm.name),
    }
    for name, queue in queues.items():
        checks[name] = (
            "ok" if await queue_has_poller(rag.client, queue) else f"nobody polls {queue}"
        )
    return checks
