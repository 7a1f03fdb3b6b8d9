"""The gateway's ASGI middlewares: the request id (with the access log line, the HTTP metrics,
the request's arrival time, its Server-Timing header and, with tracing on, its span and
`traceresponse` header) and the request body limit.
`create_app` wraps the FastAPI app in both."""

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ragkit import tracing
from ragkit.logs import TRACE_ID
from ragkit.metrics import HTTP_REQUESTS, HTTP_SECONDS, child

log = logging.getLogger("durable_rag.gateway")
REQUEST_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# Probes and scrapes: a trace every few seconds from each prober would bury the requests'.
UNTRACED = frozenset({"/healthz", "/readyz", "/metrics"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def mark(state: Any, phase: str) -> None:
    """The end of a phase of a live request (`body`, `admit`, `turn`, `settle`, `start`): its
    Server-Timing header says how long each took, from the request's arrival."""
    state.timing.append((phase, time.monotonic()))


def server_timing(arrived: float, marks: list[tuple[str, float]]) -> bytes:
    """`Server-Timing: body;dur=0.3, admit;dur=0.1, turn;dur=0.1, settle;dur=0.0, start;dur=9.5`
    (ms): each phase from the one before, the first from the request's arrival (its headers):
    `body` until the whole body was read, `admit` the door's decision (gateway/door.py), `turn`
    the start window, `settle` a burst's refusals going out first (`door.Arrivals`), `start` the
    key lookup, the endpoint's other dependencies and the workflow's start."""
    parts, since = [], arrived
    for phase, at in marks:
        parts.append(f"{phase};dur={(at - since) * 1000:.1f}")
        since = at
    return ", ".join(parts).encode()


class RequestId:
    """X-Request-ID in (or a new one), on the response, in every log line of the request, and
    one access log line at the end; a given one is also the request's idempotency key. The
    request's arrival (`state.arrived`, monotonic) is taken here, first: its access timeout
    counts from it. Plain ASGI: a streamed response passes through untouched, and a client's
    disconnect reaches the endpoint."""

    def __init__(self, app: Any) -> None:
        self.app = app

    @property
    def state(self) -> Any:
        """The wrapped app's state: create_app's caller reads it as the FastAPI app's."""
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        # A caller's own id is its idempotency key within its tenant; never the trace id, which
        # the server makes (ragkit.ids.trace_id), so no caller can name another's run.
        state["request_key"] = given if REQUEST_ID.match(given) else None
        state["arrived"] = arrived
        marks: list[tuple[str, float]] = []
        state["timing"] = marks
        token = TRACE_ID.set(request_id)
        started, status = time.perf_counter(), 0
        # With tracing on, the request's span: a caller's traceparent its parent, current
        # while the app runs, so the workflow start and every step below join its trace.
        traced = tracing.enabled() and scope["path"] not in UNTRACED
        span = request_span(scope, request_id) if traced else None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
                if marks:
                    timing = server_timing(arrived, marks)
                    message["headers"].append((b"server-timing", timing))
                if span is not None:
                    message["headers"].append((b"traceresponse", tracing.traceresponse(span)))
            await send(message)

        attached = None if span is None else otel_context.attach(trace.set_span_in_context(span))
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            # The route's template, not the path: labels stay bounded (no ids in them).
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            child(HTTP_REQUESTS, route, scope["method"], str(status or 0)).inc()
            # The trace id rides as an exemplar (OpenMetrics), never as a label; with tracing
            # on, the span's trace id beside it.
            child(HTTP_SECONDS, route).observe(seconds, exemplar=tracing.exemplar(request_id))
            if span is not None:
                end_request_span(span, scope, route, status)
            if attached is not None:
                otel_context.detach(attached)
            # A refusal's line is at DEBUG: a burst's hundreds of 429s a second would each pay
            # ~40 µs of the loop that answers the rest; gateway.door.RefusalLog says them
            # once a second per route, with their count.
            log.log(
                logging.DEBUG if status == 429 else logging.INFO,
                "%s %s %s %.0f ms",
                scope["method"],
                scope["path"],
                status or "-",
                seconds * 1000,
            )
            TRACE_ID.reset(token)


def request_span(scope: Scope, request_id: str) -> Any:
    """The request's span (SERVER, OpenInference CHAIN), child of the caller's `traceparent`
    and `tracestate` where it sent them; named by its route when the request ends."""
    carrier = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope["headers"]
        if name in (b"traceparent", b"tracestate")
    }
    return tracing.tracer().start_span(
        f"{scope['method']} {scope['path']}",
        context=tracing.extract(carrier) if carrier else None,
        kind=SpanKind.SERVER,
        attributes={
            tracing.KIND: tracing.CHAIN,
            "http.request.method": scope["method"],
            "url.path": scope["path"],
            tracing.REQUEST_ID: request_id,
        },
    )


def end_request_span(span: Any, scope: Scope, route: str, status: int) -> None:
    span.update_name(f"{scope['method']} {route}")
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500 or not status:
        span.set_status(Status(StatusCode.ERROR, f"HTTP {status or 'no response'}"))
    span.end()


class _TooLarge(Exception):
    pass


class BodyLimit:
    """413 for a body over the limit, whether it declares its length or streams chunks."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    @property
    def state(self) -> Any:
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self.too_large(scope, receive, send)
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
            await self.too_large(scope, receive, send)

    def too_large(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        message = {"detail": f"request body is over the limit of {self.limit} bytes"}
        return JSONResponse(message, status_code=413)(scope, receive, send)
