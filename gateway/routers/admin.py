"""Operations endpoints, open without an API key: liveness, readiness and Prometheus metrics."""

from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from temporalio.service import RPCError

from durable_rag.client import RagClient
from gateway.deps import AppSettings, Rag, Sessions
from ragkit import policies
from ragkit.deployments import polling_builds
from ragkit.settings import Settings
from schemas.gateway import Readiness

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness)
async def readyz(
    response: Response, settings: AppSettings, sessions: Sessions, rag: Rag
) -> Readiness:
    checks, builds = await readiness(settings, sessions, rag)
    ready = all(v == "ok" for v in checks.values())
    response.status_code = 200 if ready else 503
    return Readiness(ready=ready, checks=checks, builds=builds)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    # Prometheus asks for OpenMetrics, which carries the exemplars; others get plain text.
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    # Off the event loop: the process collector reads /proc, and a scrape held every request in
    # flight for 10-13 ms on a 2-CPU machine. The collectors read plain values (the backlog
    # gauges a dict's get), which a thread may do while the loop serves.
    body = await run_in_threadpool(encoder, REGISTRY)
    return Response(body, media_type=content_type)


async def readiness(
    settings: Settings, sessions: Any, rag: RagClient
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Ready: Postgres answers, and each queue the answer path needs has a poller (a worker
    polls only once its model is loaded). The LLM queue is the active model's: after a swap,
    the model the `default` alias names, not the settings' one (whose worker may be gone).
    With them, the builds polling each queue."""
    checks: dict[str, str] = {}
    builds: dict[str, list[str]] = {}
    try:
        with sessions() as session:
            session.execute(text("SELECT 1"))
        checks["postgres"] = "ok"
    except Exception as exc:
        checks["postgres"] = f"unreachable: {type(exc).__name__}"
    queues = {
        "orchestrator worker": settings.temporal.workflow_task_queue,
        "live worker": settings.temporal.live_task_queue,
        "index worker": settings.temporal.index_task_queue,
        "llm worker": policies.llm_queue(await rag.default_model(fresh=True)),
    }
    for name, queue in queues.items():
        try:
            polling = await polling_builds(rag.client, queue)
        except RPCError as exc:
            checks[name] = f"Temporal did not answer: {exc.message}"
            continue
        checks[name] = "ok" if polling else f"nobody polls {queue}"
        builds[name] = sorted(b or "unversioned" for b in polling)
    return checks, builds
