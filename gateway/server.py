"""The gateway process: logging with trace ids, then uvicorn. `durable-rag gateway` and
`durable-rag up` run this; docker-compose runs `durable-rag gateway`."""

from __future__ import annotations

import uvicorn

from gateway.app import create_app
from ragkit.logs import setup_logging
from ragkit.settings import Settings


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    setup_logging(settings)
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
