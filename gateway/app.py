"""HTTP gateway (R4-R7): a thin process that starts workflows and holds no state of its own.

Every endpoint but the health checks needs an API key (`Authorization: Bearer drk_...` or
`X-API-Key`); the key decides the tenant, never the body. `X-Request-ID` is accepted (or made)
and becomes the trace id and the workflow id. Invalid input gets a 4xx and starts nothing.

    durable-rag gateway            # uvicorn on settings.gateway_host:gateway_port
"""

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Path, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.service import RPCError

from durable_rag import keys, policies
from durable_rag.client import RagClient
from durable_rag.db import make_sessionmaker
from durable_rag.settings import Settings
from schemas.answer import Answer, AskRequest
from schemas.conversation import CONVERSATION_ID_PATTERN, ChatReply, ConversationHistory
from schemas.gateway import AskBody, MessageBody, Readiness, RunStatus

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at
# runtime, and those built inside create_app (the tenant dependency) must resolve there.
log = logging.getLogger("durable_rag.gateway")
REQUEST_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# Causes that are the caller's fault: 422 with the message, not 5xx.
CALLER_ERRORS = {policies.INVALID_INPUT, policies.PROMPT_TOO_LONG}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


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
    sessions = make_sessionmaker(settings.sqlalchemy_url)
    holder: dict[str, RagClient] = {}
    if rag is not None:
        holder["rag"] = rag

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not settings.gateway_auth:
            log.warning(
                "AUTHENTICATION IS OFF (DURABLE_RAG_GATEWAY_AUTH=false): anyone who can reach "
                "this port acts as tenant %r",
                settings.default_tenant,
            )
        if "rag" not in holder:
            holder["rag"] = await RagClient.connect(settings)
        yield
        sessions.kw["bind"].dispose()

    app = FastAPI(
        title="durable-rag gateway",
        version="0.1.0",
        description="Answers with citations, conversations and run status over Temporal flows.",
        lifespan=lifespan,
    )

    @app.middleware("http")
    async def request_id(request: Request, call_next: Any) -> Response:
        given = request.headers.get("x-request-id", "")
        request.state.request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex
        response: Response = await call_next(request)
        response.headers["X-Request-ID"] = request.state.request_id
        return response

    def client() -> RagClient:
        return holder["rag"]

    def tenant(
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> str:
        if not settings.gateway_auth:
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
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/ask", response_model=Answer)
    async def ask(body: AskBody, request: Request, tenant: Tenant) -> Answer:
        ask_request = AskRequest(tenant=tenant, **body.model_dump())
        try:
            handle = await client().start_ask(ask_request, trace_id=request.state.request_id)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        except RPCError as exc:
            raise HTTPException(409, f"request id already used: {exc.message}") from exc
        try:
            return await asyncio.wait_for(
                handle.result(), timeout=settings.gateway_request_timeout_seconds
            )
        except TimeoutError as exc:
            await handle.cancel()  # never leave an abandoned answer running
            raise HTTPException(
                504, f"no answer within {settings.gateway_request_timeout_seconds:g} s"
            ) from exc
        except WorkflowFailureError as exc:
            raise _http_error(exc) from exc

    @app.post("/v1/conversations/{conversation_id}/messages", response_model=ChatReply)
    async def send_message(
        conversation_id: ConversationIdPath, body: MessageBody, request: Request, tenant: Tenant
    ) -> ChatReply:
        try:
            return await asyncio.wait_for(
                client().chat(
                    conversation_id,
                    body.message,
                    tenant=tenant,
                    message_id=body.message_id or request.state.request_id,
                    top_k=body.top_k,
                    max_answer_tokens=body.max_answer_tokens,
                ),
                timeout=settings.gateway_request_timeout_seconds,
            )
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        except TimeoutError as exc:
            raise HTTPException(
                504,
                f"no reply within {settings.gateway_request_timeout_seconds:g} s; the turn goes "
                "on and its reply is stored",
            ) from exc
        except WorkflowUpdateFailedError as exc:
            raise _http_error(exc) from exc

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

    return BodyLimit(app, settings.gateway_max_body_bytes)  # type: ignore[return-value]


def _http_error(exc: BaseException) -> HTTPException:
    cause: BaseException = exc
    while isinstance(cause, FailureError) and cause.cause is not None:
        cause = cause.cause
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
        "orchestrator worker": settings.workflow_task_queue,
        "index worker": settings.index_task_queue,
        "llm worker": policies.llm_queue(settings.llm_name),
    }
    for name, queue in queues.items():
        checks[name] = "ok" if await _has_poller(rag, queue) else f"nobody polls {queue}"
    return checks


async def _has_poller(rag: RagClient, queue: str) -> bool:
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    kinds = [TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW]
    try:
        for kind in kinds:
            response = await rag.client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=rag.client.namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=kind,
                )
            )
            if response.pollers:
                return True
    except RPCError:
        return False
    return False
