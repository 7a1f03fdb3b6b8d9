"""Admitting, starting, waiting for and streaming a live request: what the answer, OpenAI and
conversation endpoints share.

Errors come out as the caller sees them: a bad request is a 422, a reused request id a 409,
a request that would finish after the latency target a 429 with Retry-After (nothing started),
as is a stream that got no turn in its model's start window within the access timeout, no
answer within the access timeout a 504 (and the run is cancelled), no token stream a 503.
A client that leaves gets its run cancelled; its request is logged and counted as 499.

The access timeout counts from the request's arrival (gateway/middleware.py): the time in the
endpoint's dependencies, in admission, in the start window and in the workflow's start is spent
from it (`Deadline`).
"""

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from durable_rag.client import IdempotencyConflict, RagClient
from gateway import door
from gateway.door import Cost
from gateway.errors import http_error, stream_error
from gateway.middleware import mark
from gateway.streams import Deadline, in_background, text_events
from ragkit import tracing
from ragkit.admission import Overloaded, Ticket
from ragkit.metrics import ANSWER_TIMEOUTS
from ragkit.retrieval import estimate_tokens
from ragkit.settings import Settings
from ragkit.streaming import TokenListener
from schemas.answer import Answer, AskRequest

log = logging.getLogger("durable_rag.gateway")
ASK_STREAM = "/v1/ask/stream"
T = TypeVar("T")

# nginx's "client closed request": nobody reads it, the access log and the metrics do.
CLIENT_LEFT = 499


class ClientLeft(Exception):
    """The client disconnected before its request was done."""


def deadline_of(request: Request, settings: Settings) -> Deadline:
    """The request's access timeout, from its arrival."""
    return Deadline.after(settings.access_timeout_seconds, getattr(request.state, "arrived", None))


def prompt_tokens(*texts: str) -> int:
    """The prompt tokens a request brings of its own (question, history), as admission counts
    them; the retrieved context is in each request's fixed cost."""
    return sum(estimate_tokens(text) for text in texts if text)


async def admitted(request: Request, cost: Cost) -> Ticket:
    """The request's ticket: the door's (gateway/door.py), or, for a body the door could not
    read a cost from, one taken here; 429 with Retry-After when it would finish after the
    latency target (ragkit/admission.py)."""
    ticket: Ticket | None = getattr(request.state, "ticket", None)
    if ticket is not None:
        return ticket
    route = getattr(request.scope.get("route"), "path", None) or "unmatched"
    try:
        ticket = await door.admit(request.app.state, route, cost)
    except Overloaded as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from exc
    finally:
        mark(request.state, "admit")
    request.state.ticket = ticket
    return ticket


async def take_turn(request: Request, ticket: Ticket, deadline: Deadline) -> None:
    """Wait for the ticket's place in its model's start window (ragkit/admission.py): streamed
    requests reach the engine in arrival order, a batch at a time. 429 with Retry-After when no
    place came by the deadline (nothing was started, the ticket is released). The door waits
    for it first (gateway/door.py); this waits only for a request the door let through without
    a ticket."""
    if getattr(request.state, "turned", False):
        return
    route = getattr(request.scope.get("route"), "path", None) or "unmatched"
    try:
        await door.wait_turn(ticket, deadline, route, request.app.state.settings)
    except door.NoTurn as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from exc
    finally:
        mark(request.state, "turn")


@contextlib.asynccontextmanager
async def plain_turn(
    request: Request, ticket: Ticket, deadline: Deadline, listener: TokenListener
) -> AsyncIterator[str]:
    """A plain (not streamed) request's turn in the start window, given up at its first token
    as a stream's is: yields the stream id to start its run with, of which the gateway waits
    for the first event only. Without a turn, a burst's admitted plain requests all started
    their workflows at once, on the event loop that answers the burst's refusals
    (bench/burst.py: their 429s came 0.2-0.7 s after the request, 0.1 s for streams'). Where
    no stream can be opened the place is held until the request ends."""
    await take_turn(request, ticket, deadline)
    if not ticket.in_window:  # no window
        yield ""
        return
    stream_id = uuid.uuid4().hex
    try:
        queue = await listener.open(stream_id)
    except Exception as exc:
        log.warning("no first-token watch, the turn is held to the end: %s", exc)
        yield ""
        return

    async def first_token() -> None:
        await queue.get()

    def done(_: object) -> None:  # the first token, or the request's end
        ticket.streaming()
        listener.close_stream(stream_id)

    watch = asyncio.create_task(first_token())
    watch.add_done_callback(done)
    try:
        yield stream_id
    finally:
        watch.cancel()


async def client_left(request: Request) -> None:
    """Returns once the client has disconnected. Only after the body was read (an endpoint with
    a body parameter): from then on the server's next message is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_done(work: Awaitable[T], request: Request, timeout: float) -> T:
    """The result of `work`, raced against the client: ClientLeft when it disconnects first,
    TimeoutError after `timeout` seconds. Either way `work` is no longer awaited."""
    task = asyncio.ensure_future(work)
    left = asyncio.ensure_future(client_left(request))
    try:
        done, _ = await asyncio.wait({task, left}, timeout=timeout, return_when="FIRST_COMPLETED")
    finally:
        left.cancel()
        task.cancel()
    if task in done:
        return task.result()
    if left in done:
        raise ClientLeft
    raise TimeoutError


def released(events: AsyncGenerator[dict[str, str], None], ticket: Ticket) -> EventSourceResponse:
    """Server-Sent Events that release `ticket` when the stream ends, however it ends: the
    events' own end, the client leaving, the timeout; the background task covers a stream
    whose events never began."""

    async def stream() -> AsyncIterator[dict[str, str]]:
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        finally:
            ticket.release()

    async def release() -> None:  # async: on the event loop, not in a worker thread
        ticket.release()

    return EventSourceResponse(stream(), background=BackgroundTask(release))


async def start_answer(
    rag: RagClient,
    ask_request: AskRequest,
    request_key: str | None,
    stream_id: str = "",
    history: Any = None,
    request: Request | None = None,
) -> WorkflowHandle[Any, Answer]:
    """`request_key`: the caller's X-Request-ID, if it sent one (a retry attaches to its run;
    another body under it is 409). A request that names no model goes to the default alias as
    it is now, not as it was at admission: it may have waited in the start window through a
    model swap, which drains the old model's worker only of the answers started before it."""
    try:
        handle = await rag.start_ask(
            ask_request, request_key=request_key, stream_id=stream_id, history=history
        )
    except IdempotencyConflict as exc:
        raise HTTPException(409, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    except RPCError as exc:
        raise HTTPException(503, f"cannot start the answer: {exc.message}") from exc
    finally:
        if request is not None:
            mark(request.state, "start")
    # The trace id is the server's: this line (tagged with the request id) links the two.
    log.info("answer run %s", handle.id)
    tracing.annotate(
        {
            "durable_rag.workflow_id": handle.id,
            tracing.TENANT: ask_request.tenant,
            **tracing.content(tracing.INPUT, ask_request.question),
        }
    )
    return handle


def traced(answer: Answer) -> Answer:
    tracing.answered(answer)
    return answer


async def finish_answer(
    handle: WorkflowHandle[Any, Answer], deadline: Deadline, request: Request
) -> Answer:
    """The answer; 504 past the deadline, 499 when the client leaves: the run is cancelled, so
    generation stops, in both cases (never an abandoned answer left running)."""
    try:
        return traced(await until_done(handle.result(), request, deadline.left()))
    except TimeoutError as exc:
        ANSWER_TIMEOUTS.labels("answer").inc()
        await cancel_now(handle, f"no answer within {deadline.said}")
        raise HTTPException(
            504, f"no answer within {deadline.said}; the run was cancelled"
        ) from exc
    except ClientLeft as exc:
        await cancel_now(handle, "the client left")
        raise HTTPException(CLIENT_LEFT, "the client left; the run was cancelled") from exc
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
    request_key: str | None,
    history: Any = None,
    request: Request | None = None,
) -> tuple[WorkflowHandle[Any, Answer], str, asyncio.Queue[Any]]:
    """The token stream first, so no token is published before anyone listens."""
    stream_id, queue = await open_stream(listener)
    try:
        handle = await start_answer(rag, ask_request, request_key, stream_id, history, request)
    except BaseException:
        listener.close_stream(stream_id)
        raise
    return handle, stream_id, queue


async def cancel_now(handle: WorkflowHandle[Any, Any], why: str) -> None:
    tracing.event("cancel", {"durable_rag.workflow_id": handle.id, "reason": why})
    try:
        await handle.cancel()
        log.info("cancelled %s: %s", handle.id, why)
    except RPCError as exc:  # already closed, most often
        log.warning("could not cancel %s: %s", handle.id, exc)


def cancel_later(handle: WorkflowHandle[Any, Any], why: str) -> None:
    """From a stream's cleanup, which may itself be cancelled: in a task of its own."""
    in_background(cancel_now(handle, why))


async def answer_events(
    handle: WorkflowHandle[Any, Answer],
    stream_id: str,
    queue: asyncio.Queue[Any],
    listener: TokenListener,
    deadline: Deadline,
    on_text: Callable[[], None] | None = None,
) -> AsyncGenerator[dict[str, str], None]:
    """`start`, then `token` (text) and `reset` (start over) events, then `answer` (the
    whole Answer) or `error`: a 504 one at the deadline. A client that leaves cancels the
    workflow."""
    result = asyncio.ensure_future(handle.result())
    closed = False
    try:
        yield {"event": "start", "data": json.dumps({"trace_id": handle.id})}
        first = tracing.enabled()
        async for event in text_events(queue, result, deadline, on_text):
            if first and event["event"] == "token":
                tracing.event("first token")  # the trace's time to first token, as sent
                first = False
            yield event
        answer = traced(result.result())
        closed = True
        yield {"event": "answer", "data": answer.model_dump_json()}
    except TimeoutError:
        ANSWER_TIMEOUTS.labels("answer_stream").inc()
        yield stream_error(
            ASK_STREAM, 504, f"no answer within {deadline.said}; the run was cancelled"
        )
    except WorkflowFailureError as exc:
        closed = True
        error = http_error(exc)
        yield stream_error(ASK_STREAM, error.status_code, str(error.detail))
    except Exception as exc:  # after the 200: the client learns it from this event alone
        log.exception("the answer stream of %s failed", handle.id)
        yield stream_error(ASK_STREAM, 502, f"the stream failed: {exc}")
    finally:
        listener.close_stream(stream_id)
        result.cancel()
        if not closed:
            cancel_later(handle, "the client left or the answer timed out")
