"""Operations endpoints, open without an API key: liveness, readiness and Prometheus metrics."""

from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from sqlalchemy import text

from durable_rag.client import RagClient
from gateway.deps import AppSettings, Rag, Sessions
from ragkit import policies
from ragkit.settings import Settings
from ragkit.temporal import queue_has_poller
from schemas.gateway import Readiness

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness)
async def readyz(
    response: Response, settings: AppSettings, sessions: Sessions, rag: Rag
) -> Readiness:
    checks = await readiness(settings, sessions, rag)
    ready = all(v == "ok" for v in checks.values())
    response.status_code = 200 if ready else 503
    return Readiness(ready=ready, checks=checks)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    # Prometheus asks for OpenMetrics, which carries the exemplars; others get plain text.
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(REGISTRY), media_type=content_type)


async def readiness(settings: Settings, sessions: Any, rag: RagClient) -> dict[str, str]:
    """Ready: Postgres answers, and each queue the answer path needs has a poller (a worker
    polls only once its model is loaded). The LLM queue is the active model's: after a swap,
    the model the `default` alias names, not the settings' one (whose worker may be gone)."""
    checks: dict[str, str] = {}
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
        checks[name] = (
            "ok" if await queue_has_poller(rag.client, queue) else f"nobody polls {queue}"
        )
    return checks
