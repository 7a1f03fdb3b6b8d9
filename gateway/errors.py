"""How failures reach the caller: a failed flow as an HTTPException, an error as an SSE event,
and the app's exception handlers (OpenAI clients get OpenAI's error shape)."""

import json

from fastapi import HTTPException, Request, Response
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.exceptions import ApplicationError

from durable_rag.client import failure_cause
from gateway import openai_compat
from ragkit import policies
from ragkit.metrics import HTTP_STREAM_ERRORS
from workflows.conversation import TURN_CANCELLED

# Causes that are the caller's fault: 422 with the message, not 5xx.
CALLER_ERRORS = {policies.INVALID_INPUT, policies.PROMPT_TOO_LONG}


def error_event(status: int, detail: str) -> dict[str, str]:
    return {"event": "error", "data": json.dumps({"status": status, "detail": detail})}


def stream_failed(route: str, status: int) -> None:
    """A stream's failure, counted: its response already went out as 200, so the request
    counter cannot tell (the error-rate alert adds these to the 5xx responses)."""
    HTTP_STREAM_ERRORS.labels(route, str(status)).inc()


def stream_error(route: str, status: int, detail: str) -> dict[str, str]:
    """The `error` event that ends a stream of `route` (its template), counted."""
    stream_failed(route, status)
    return error_event(status, detail)


def _caller_error(exc: BaseException) -> ApplicationError | None:
    """The caller's-fault error anywhere in the failure chain: an activity raising one `from`
    the engine's own exception carries that exception as its innermost cause."""
    cause: object = exc
    while isinstance(cause, BaseException):
        if isinstance(cause, ApplicationError) and cause.type in CALLER_ERRORS:
            return cause
        cause = getattr(cause, "cause", None)
    return None


def http_error(exc: BaseException) -> HTTPException:
    caller = _caller_error(exc)
    if caller is not None:
        return HTTPException(422, f"{caller.type}: {caller.message}")
    cause = failure_cause(exc)
    if isinstance(cause, ApplicationError) and cause.type == TURN_CANCELLED:
        return HTTPException(
            409, f"{cause.message} (its client left or timed out): send it with a new message id"
        )
    return HTTPException(502, f"the flow failed: {cause}")


async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if request.url.path in openai_compat.PATHS:  # OpenAI clients read error.message
        return JSONResponse(
            json.loads(openai_compat.error(exc.status_code, str(exc.detail))),
            status_code=openai_compat.status_for(exc.status_code),
            headers=exc.headers,
        )
    return await http_exception_handler(request, exc)


async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
    if request.url.path in openai_compat.PATHS:  # 400, as OpenAI's API and vLLM's answer
        message = openai_compat.invalid_message(list(exc.errors()))
        return JSONResponse(json.loads(openai_compat.error(400, message)), status_code=400)
    return await request_validation_exception_handler(request, exc)
