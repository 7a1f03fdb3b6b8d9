"""Starting, waiting for and streaming an answer workflow: what the native and the
OpenAI-compatible answer endpoints share.

Errors come out as the caller sees them: a bad request is a 422, a reused request id a 409,
no answer in time a 504 (and the run is cancelled), no token stream a 503.
"""

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from durable_rag.client import RagClient
from gateway.errors import error_event, http_error
from gateway.streams import Token, in_background, relay
from ragkit.metrics import ANSWER_TIMEOUTS
from ragkit.streaming import TokenListener
from schemas.answer import Answer, AskRequest

log = logging.getLogger("durable_rag.gateway")


async def start_answer(
    rag: RagClient,
    ask_request: AskRequest,
    trace_id: str,
    stream_id: str = "",
    history: Any = None,
) -> WorkflowHandle[Any, Answer]:
    try:
        return await rag.start_ask(
            ask_request, trace_id=trace_id, stream_id=stream_id, history=history
        )
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    except RPCError as exc:
        raise HTTPException(409, f"request id already used: {exc.message}") from exc


async def finish_answer(handle: WorkflowHandle[Any, Answer], timeout: float) -> Answer:
    try:
        return await asyncio.wait_for(handle.result(), timeout=timeout)
    except TimeoutError as exc:
        ANSWER_TIMEOUTS.labels("answer").inc()
        await handle.cancel()  # never leave an abandoned answer running
        raise HTTPException(504, f"no answer within {timeout:g} s") from exc
    except WorkflowFailureError as exc:
        raise http_error(exc) from exc


async def open_stream(listener: TokenListener) -> tuple[str, asyncio.Queue[Any]]:
    stream_id = uuid.uuid4().hex
    try:
        return stream_id, await listener.open(stream_id)
    except Exception as exc:
        log.error("token stream unavailable: %s", exc)
        raise HTTPException(503, "streaming is unavailable: cannot LISTEN on Postgres") from exc


async def start_streamed_answer(
    rag: RagClient,
    listener: TokenListener,
    ask_request: AskRequest,
    trace_id: str,
    history: Any = None,
) -> tuple[WorkflowHandle[Any, Answer], str, asyncio.Queue[Any]]:
    """The token stream first, so no token is published before anyone listens."""
    stream_id, queue = await open_stream(listener)
    try:
        handle = await start_answer(rag, ask_request, trace_id, stream_id, history)
    except BaseException:
        listener.close_stream(stream_id)
        raise
    return handle, stream_id, queue


def cancel_later(handle: WorkflowHandle[Any, Any], why: str) -> None:
    async def cancel() -> None:
        try:
            await handle.cancel()
            log.info("cancelled %s: %s", handle.id, why)
        except RPCError as exc:
            log.warning("could not cancel %s: %s", handle.id, exc)

    in_background(cancel())


async def answer_events(
    handle: WorkflowHandle[Any, Answer],
    stream_id: str,
    queue: asyncio.Queue[Any],
    listener: TokenListener,
    timeout: float,
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
        yield error_event(504, f"no answer within {timeout:g} s; the run was cancelled")
    except WorkflowFailureError as exc:
        closed = True
        error = http_error(exc)
        yield error_event(error.status_code, str(error.detail))
    finally:
        listener.close_stream(stream_id)
        result.cancel()
        if not closed:
            cancel_later(handle, "the client left or the answer timed out")
