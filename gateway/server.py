"""The gateway process: logging with trace ids, tracing when it is on, then uvicorn. `durable-rag gateway` and
`durable-rag up` run this; docker-compose runs `durable-rag gateway`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from gateway.app import create_app
from ragkit import tracing
from ragkit.logs import setup_logging
from ragkit.settings import Settings


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    setup_logging(settings)
    tracing.setup(settings, "gateway")
    uvicorn.run(
        create_app(settings),
        host=host or settings.gateway.host,
        port=port or settings.gateway.port,
        # Our logging, not uvicorn's: every line carries the trace id, and the gateway writes
        # its own access line (with the request id) instead of uvicorn's.
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )


@asynccontextmanager
async def serving_here(app: Any, port: int) -> AsyncIterator[None]:
    """`app` on uvicorn on 127.0.0.1:`port` inside this event loop, until the block ends: real
    sockets (a client that closes its connection is a real disconnect), for tests and
    benchmarks that run the workers in the same process."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    running = asyncio.create_task(server.serve())
    while not server.started:
        if running.done():
            running.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        await running
