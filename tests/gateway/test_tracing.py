"""The gateway's part of a trace (gateway/middleware.py): the request's span under the caller's
`traceparent`, current while the app runs, its `traceresponse`; refusals at the door traced
too, probes and scrapes not."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.middleware import RequestId
from ragkit import tracing
from tests.spans import recorded

CALLER_TRACE, CALLER_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with recorded() as spans:
        yield spans


def app() -> httpx.AsyncClient:
    async def ask(request: Request) -> JSONResponse:
        # What the endpoint's own work sees: the request's span is current.
        current = trace.get_current_span().get_span_context()
        with tracing.step("retrieve", tracing.RETRIEVER):
            pass
        status = 429 if request.query_params.get("full") else 200
        return JSONResponse({"trace": format(current.trace_id, "032x")}, status_code=status)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    inner = Starlette(routes=[Route("/v1/ask", ask, methods=["POST"]), Route("/healthz", healthz)])
    transport = httpx.ASGITransport(app=RequestId(inner))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


async def test_the_callers_trace_goes_on_through_the_request(
    exporter: InMemorySpanExporter,
) -> None:
    async with app() as http:
        response = await http.post("/v1/ask", headers={"traceparent": TRACEPARENT})
    assert response.json()["trace"] == CALLER_TRACE
    assert response.headers["traceresponse"].startswith(f"00-{CALLER_TRACE}-")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    request, step = spans["POST /v1/ask"], spans["retrieve"]
    assert request.parent is not None and format(request.parent.span_id, "016x") == CALLER_SPAN
    assert step.parent is not None and step.parent.span_id == request.context.span_id
    attributes = dict(request.attributes or {})
    assert attributes["openinference.span.kind"] == "CHAIN"
    assert attributes["http.response.status_code"] == 200
    assert attributes["durable_rag.request_id"] == response.headers["x-request-id"]


async def test_without_a_traceparent_a_trace_starts_and_probes_make_none(
    exporter: InMemorySpanExporter,
) -> None:
    async with app() as http:
        asked = await http.post("/v1/ask?full=1")
        probed = await http.get("/healthz")
    assert asked.status_code == 429  # a refusal is traced as any request is
    [request] = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/ask"]
    assert request.parent is None
    assert asked.headers["traceresponse"].split("-")[1] == asked.json()["trace"]
    assert "traceresponse" not in probed.headers
    assert not [s for s in exporter.get_finished_spans() if "healthz" in s.name]


async def test_with_tracing_off_there_is_no_span_and_no_header() -> None:
    async with app() as http:
        response = await http.post("/v1/ask", headers={"traceparent": TRACEPARENT})
    assert "traceresponse" not in response.headers
    assert response.json()["trace"] == "0" * 32  # nothing current: the caller's is not taken up
