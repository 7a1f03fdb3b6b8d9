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
from workflows.conversation import TURN_CANCELLED

# Causes that are the caller's fault: 422 with the message, not 5xx.
CALLER_ERRORS = {policies.INVALID_INPUT, policies.PROMPT_TOO_LONG}


def error_event(status: int, detail: str) -> dict[str, str]:
    return {"event": "error", "data": json.dumps({"status": status, "detail": detail})}


def http_error(exc: BaseException) -> HTTPException:
    cause = failure_cause(exc)
    if isinstance(cause, ApplicationError) and cause.type in CALLER_ERRORS:
        return HTTPException(422, f"{cause.type}: {cause.message}")
    if isinstance(cause, ApplicationError) and cause.type == TURN_CANCELLED:
        return HTTPException(
            409, f"{cause.message} (its client left or timed out): send it with a new message id"
        )
    return HTTPException(502, f"the flow failed: {cause}")


async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if request.url.path in openai_compat.PATHS:  # OpenAI clients read error.message
        return JSONResponse(
            json.loads(openai_compat.error(exc.status_code, str(exc.detail))),
            status_code=exc.status_code,
            headers=exc.headers,
        )
    return await http_exception_handler(request, exc)


async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
    if request.url.path in openai_compat.PATHS:
        message = "; ".join(
            f"{'.'.join(str(part) for part in e['loc'][1:]) or 'body'}: {e['msg']}"
            for e in exc.errors()
        )
        return JSONResponse(json.loads(openai_compat.error(422, message)), status_code=422)
    return await request_validation_exception_handler(request, exc)
