"""HTTP gateway (R4-R7): a thin process that starts workflows and holds no state of its own.

Every endpoint but the health checks needs an API key (`Authorization: Bearer drk_...` or
`X-API-Key`); the key decides the tenant, never the body. `X-Request-ID` is accepted (or made)
and becomes the trace id and the workflow id. Invalid input gets a 4xx and starts nothing.

Streaming endpoints (`/v1/ask/stream`, `.../messages/stream`, `/v1/chat/completions` with
`stream`) relay the generation's text from Postgres LISTEN/NOTIFY (ragkit/streaming.py) as
Server-Sent Events. A client that leaves mid-answer (streamed or not, an answer or a
conversation turn) gets its answer workflow cancelled, and the cancellation reaches the engine
(R6); so does a request past the access timeout (`Settings.access_timeout_seconds`, 504).

Admission (ragkit/admission.py): a live request that would finish after the latency target (the
work admitted before it, plus its own latency) gets 429 with Retry-After at once, at the door
(gateway/door.py: before routing and the key lookup), and starts no workflow. Gateways share that bound by their heartbeats (gateway/peers.py). The access timeout
counts from a request's arrival.

`create_app` puts what endpoints share on `app.state` (gateway/deps.py reads it from there) and
includes one router per area (gateway/routers/).

    durable-rag gateway            # uvicorn on settings.gateway.host:settings.gateway.port
"""

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException

from durable_rag.client import RagClient
from gateway import errors
from gateway.door import Door
from gateway.middleware import BodyLimit, RequestId
from gateway.peers import Peers
from gateway.routers import (
    admin,
    answers,
    codec,
    conversations,
    documents,
    feedback,
    openai,
    runs,
)
from gateway.warm import ApiKeys, Refresher, import_lazy, open_pool, open_token_stream
from ragkit.admission import Admission
from ragkit.codec import codec_for
from ragkit.db import make_sessionmaker
from ragkit.settings import Settings
from ragkit.streaming import TokenListener

log = logging.getLogger("durable_rag.gateway")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    if not settings.gateway.auth:
        log.warning(
            "AUTHENTICATION IS OFF (DURABLE_RAG_GATEWAY_AUTH=false): anyone who can reach "
            "this port acts as tenant %r",
            settings.default_tenant,
        )
    if app.state.rag is None:
        app.state.rag = await RagClient.connect(settings, app.state.sessions)
    app.state.refresher = Refresher(app.state.rag, app.state.api_keys)
    app.state.refresher.start()
    peers = Peers(app.state.sessions, app.state.admission, settings.gateway.heartbeat_seconds)
    await peers.start()  # before the first request: its share is known from the start
    await open_token_stream(app.state.token_listener)
    await open_pool(app.state.sessions)
    await app.state.rag.default_model(fresh=True)  # the door's admission reads it from here on
    await import_lazy()
    # What starting made lives as long as the process: out of the collector's reach, so the
    # collections a burst's garbage triggers do not walk it (the first burst of 300 refusals
    # after a start took ~1.6x the gateway's CPU of the next ones without this).
    gc.collect()
    gc.freeze()
    yield
    await peers.stop()
    await app.state.refresher.stop()
    await app.state.token_listener.close()
    app.state.sessions.kw["bind"].dispose()


def create_app(settings: Settings, rag: RagClient | None = None) -> FastAPI:
    app = FastAPI(
        title="durable-rag gateway",
        version="0.1.0",
        description="Answers with citations, conversations, documents and run status over "
        "Temporal flows; an OpenAI-compatible chat completions endpoint.",
        lifespan=lifespan,
        exception_handlers={
            StarletteHTTPException: errors.on_http_error,
            RequestValidationError: errors.on_invalid,
        },
    )
    app.state.settings = settings
    app.state.sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    app.state.token_listener = TokenListener(settings.postgres.sqlalchemy_url)
    app.state.admission = Admission.from_settings(settings.llm)
    app.state.api_keys = ApiKeys(app.state.sessions)
    app.state.refresher = None  # the lifespan's: reads ahead of live requests (gateway/warm.py)
    # Unless given, connected in the lifespan: the Temporal client belongs to the server's event
    # loop, and create_app runs before there is one.
    app.state.rag = rag
    # For the codec endpoint (operators' decoding); a keyring that cannot load fails here.
    app.state.codec = codec_for(settings)
    for area in (admin, answers, conversations, openai, documents, feedback, runs, codec):
        app.include_router(area.router)
    if app.state.codec is not None and settings.security.admin_key is not None:
        # The Temporal UI calls the codec endpoint from its own origin.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.codec_origins,
            allow_methods=["POST"],
            allow_headers=["authorization", "content-type", "x-namespace"],
        )
    # Live requests are admitted at the door, before routing, validation or the key lookup.
    door = Door(app, [*answers.LIVE, *openai.LIVE, *conversations.LIVE])
    return RequestId(BodyLimit(door, settings.gateway.max_body_bytes))  # type: ignore[return-value]
