"""One trace per request across every process (ragkit/tracing.py), end to end: the embedded stack
as real processes with tracing on, exporting to a real OTLP receiver in this test (bench/otlp.py),
which passes every request on to the stack's trace viewer (Phoenix, as `durable-rag up --tracing`
starts it), and requests through the gateway carrying a caller's `traceparent`."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench.otlp import OtlpReceiver, ReceivedSpan
from bench.scaleout import api_key
from bench.stack import ProcessStack
from durable_rag.client import RagClient
from durable_rag.stack.process import free_port, tail
from durable_rag.stack.viewer import TraceViewer
from ragkit.temporal import connect
from tests.conftest import copy_documents
from tests.gateway.test_codec_ui import chromium_at

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

TENANT = "traced"
SERVICES = {
    "durable-rag-gateway",
    "durable-rag-orchestrator",
    "durable-rag-index",
    "durable-rag-llm",
}


@dataclass
class Traced:
    stack: ProcessStack
    receiver: OtlpReceiver
    viewer: TraceViewer
    url: str
    key: str


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    chromium = shutil.which("chromium")
    # Before the slow part: a missing browser should not cost a stack start to learn.
    assert chromium, "chromium is not installed: `make test` installs it (scripts/system-deps.sh)"
    scratch = Path(tempfile.mkdtemp(prefix="durable-rag-viewer-"))
    viewer = TraceViewer(scratch, free_port())
    # Phoenix installs (first use) and starts while the stack starts.
    viewing = ThreadPoolExecutor(1).submit(viewer.start, echo=None)
    receiver = OtlpReceiver(forward_to=viewer.traces_endpoint).start()
    stack = ProcessStack(
        "traces",
        tracing_enabled="true",
        tracing_endpoint=receiver.url,
        reranker_model="packaged:minilm-reranker",
    )
    try:
        stack.start()
        url = stack.start_gateway()

        async def seed() -> None:
            client = await connect(stack.settings)
            folder = copy_documents(["technology/unicode-and-utf-8.md"], stack.work / "seed")
            result = await RagClient(client, stack.settings).ingest([str(folder)], TENANT)
            assert not result.failures, result.failures

        asyncio.run(seed())
        viewing.result(timeout=600)
        yield Traced(stack, receiver, viewer, url, api_key(stack, TENANT))
    finally:
        stack.close()
        receiver.close()
        viewing.cancel()
        viewer.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def caller() -> tuple[str, str, str]:
    """A caller's own trace and span, and its W3C header."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def by_name(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {sorted(s.name for s in spans)}"
    return found[0]


def ancestors(span: ReceivedSpan, spans: list[ReceivedSpan]) -> list[str]:
    """The names of `span`'s ancestors in the trace, nearest first."""
    by_id = {s.span_id: s for s in spans}
    names, parent = [], by_id.get(span.parent_id)
    while parent is not None:
        names.append(parent.name)
        parent = by_id.get(parent.parent_id)
    return names


def test_one_answer_is_one_trace_from_the_callers_span_to_the_engines(traced: Traced) -> None:
    trace_id, span_id, traceparent = caller()
    response = httpx.post(
        f"{traced.url}/v1/ask",
        json={"question": "Who designed the UTF-8 encoding?", "max_answer_tokens": 16},
        headers={"Authorization": f"Bearer {traced.key}", "traceparent": traceparent},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    # The response names the trace it joined: the caller's.
    assert response.headers["traceresponse"].startswith(f"00-{trace_id}-")
    answer = response.json()

    def complete(spans: list[ReceivedSpan]) -> bool:
        names = {s.name for s in spans}
        return {"llm_request", "generate", "index search", "rerank", "POST /v1/ask"} <= names

    spans = traced.receiver.wait_for(trace_id, complete)
    assert {s.service for s in spans} >= SERVICES
    # Every span hangs off the caller's: one tree, no orphan.
    ids = {s.span_id for s in spans}
    assert all(s.parent_id in ids or s.parent_id == span_id for s in spans), [
        (s.name, s.parent_id) for s in spans if s.parent_id not in ids
    ]
    gateway = by_name(spans, "POST /v1/ask")
    assert gateway.parent_id == span_id and gateway.service == "durable-rag-gateway"
    assert gateway.attributes["openinference.span.kind"] == "CHAIN"
    assert gateway.attributes["durable_rag.workflow_id"] == answer["trace_id"]
    assert gateway.attributes["durable_rag.route"] == answer["route"]
    # Tenant text stays out by default.
    assert not [k for s in spans for k in s.attributes if k.endswith(("content", ".value"))]

    start = by_name(spans, "StartWorkflow:AnswerWorkflow")
    assert start.parent_id == gateway.span_id
    retrieve = by_name(spans, "retrieve")
    assert retrieve.service == "durable-rag-orchestrator" and retrieve.kind == "RETRIEVER"
    assert retrieve.attributes["retrieval.documents.0.document.id"]
    assert isinstance(retrieve.attributes["retrieval.documents.0.document.score"], float)
    # The index worker's reads, over its socket: BM25 and dense apart (the default fusion).
    searches = [s for s in spans if s.name == "index search"]
    assert {s.attributes["durable_rag.index.op"] for s in searches} == {"keyword", "dense"}
    assert all(s.service == "durable-rag-index" for s in searches)
    assert all(s.parent_id == retrieve.span_id for s in searches)
    hydrate = by_name(spans, "hydrate")
    assert hydrate.kind == "RETRIEVER" and "StartWorkflow:AnswerWorkflow" in ancestors(
        hydrate, spans
    )
    rerank = by_name(spans, "rerank")
    assert rerank.service == "durable-rag-index" and rerank.kind == "RERANKER"
    assert rerank.attributes["reranker.output_documents.0.document.score"] is not None
    generate = by_name(spans, "generate")
    assert generate.service == "durable-rag-llm" and generate.kind == "LLM"
    assert generate.attributes["llm.model_name"] == answer["model"]
    assert generate.attributes["llm.token_count.completion"] == answer["tokens"]["completion"]
    assert json.loads(generate.attributes["llm.invocation_parameters"])["max_tokens"] == 16
    # The engine's own span, inside generate: queue, prefill, decode, time to first token.
    engine = by_name(spans, "llm_request")
    assert engine.parent_id == generate.span_id and engine.service == "durable-rag-llm"
    assert engine.attributes["gen_ai.usage.completion_tokens"] == answer["tokens"]["completion"]
    assert engine.attributes["gen_ai.latency.time_to_first_token"] > 0
    # And the steps run inside the workflow's activities, which hang off the gateway's span.
    assert "POST /v1/ask" in ancestors(generate, spans)
    assert any(n.startswith("RunActivity:generate") for n in ancestors(generate, spans))


def test_a_stream_the_client_leaves_shows_the_cancellation_reaching_the_engine(
    traced: Traced,
) -> None:
    trace_id, _, traceparent = caller()
    with httpx.stream(
        "POST",
        f"{traced.url}/v1/ask/stream",
        json={"question": "Tell me all about UTF-8, at length.", "max_answer_tokens": 250},
        headers={"Authorization": f"Bearer {traced.key}", "traceparent": traceparent},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line == "event: token":
                break  # the first token: leave mid-generation

    def cancelled(spans: list[ReceivedSpan]) -> bool:
        generate = [s for s in spans if s.name == "generate"]
        gateway = [s for s in spans if s.name == "POST /v1/ask/stream"]
        return bool(generate and gateway)

    spans = traced.receiver.wait_for(trace_id, cancelled)
    gateway = by_name(spans, "POST /v1/ask/stream")
    assert "first token" in gateway.events and "cancel" in gateway.events
    generate = by_name(spans, "generate")
    assert "engine abort" in generate.events and "cancelled" in generate.events
    assert generate.attributes["openinference.span.kind"] == "LLM"
    # Cut short: far fewer tokens than asked for reached the engine's accounting.
    assert "llm.token_count.completion" not in generate.attributes


async def test_the_viewer_shows_one_answer_as_one_tree(traced: Traced, tmp_path: Path) -> None:
    """What an operator opens from an answer's trace id: Phoenix's page of the trace, with the
    gateway's request, the retrieval, the rerank and the generation with the engine's span in
    it. The screenshot goes in the docs (docs/images/trace.png)."""
    trace_id, _, traceparent = caller()
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(
            f"{traced.url}/v1/ask",
            json={"question": "Who designed the UTF-8 encoding?", "max_answer_tokens": 16},
            headers={"Authorization": f"Bearer {traced.key}", "traceparent": traceparent},
        )
    assert response.status_code == 200, response.text
    wanted = {"POST /v1/ask", "retrieve", "rerank", "generate", "llm_request"}
    deadline = time.monotonic() + 60
    while not wanted <= (held := {str(s["name"]) for s in spans_of(traced.viewer, trace_id)}):
        assert time.monotonic() < deadline, (
            f"the viewer holds {sorted(held)} of trace {trace_id}; forwarding errors: "
            f"{traced.receiver.forward_errors[-3:]}; its log:\n{tail(traced.viewer.process.log_file)}"
        )
        await asyncio.sleep(0.5)
    chromium = shutil.which("chromium")
    assert chromium
    link = traced.viewer.trace_link(trace_id)
    async with chromium_at(chromium, link, tmp_path / "chromium-profile") as (page, log):
        # Tall enough for the whole tree, the engine's span at its foot.
        await page.call(
            "Emulation.setDeviceMetricsOverride",
            width=1400, height=1500, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        text, deadline = "", time.monotonic() + 60
        while not all(name in text for name in wanted) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            text = await page.text()
        await asyncio.sleep(1.0)  # the tree laid out before the picture
        shot = await page.screenshot(tmp_path / "trace.png")
    if into := os.environ.get("DURABLE_RAG_SCREENSHOT_DIR"):
        Path(into).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(into) / shot.name)
    assert all(name in text for name in wanted), (
        f"the viewer's page of {trace_id} did not show {sorted(wanted)} within 60 s "
        f"(screenshot {shot}); it said:\n{text[-2000:]}\nchromium:\n{tail(log)}"
    )


def spans_of(viewer: TraceViewer, trace_id: str) -> list[dict[str, object]]:
    return [
        s
        for s in viewer.spans()
        if isinstance(s.get("context"), dict) and s["context"]["trace_id"] == trace_id  # type: ignore[index]
    ]
