"""Our contract around OpenTelemetry (ragkit/tracing.py): off, nothing at all; on, our steps'
spans with OpenInference attributes, tenant text only when asked for, the context across our
own wires, and the span's trace id in log lines and exemplars."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragkit import tracing
from ragkit.logs import _JsonFormatter, _TraceFilter
from ragkit.settings import Settings
from tests.spans import recorded


class Traces:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]


@pytest.fixture
def traces() -> Iterator[Traces]:
    with recorded() as exporter:
        yield Traces(exporter)


@pytest.fixture
def with_content() -> Iterator[Traces]:
    with recorded(capture_content=True) as exporter:
        yield Traces(exporter)


def test_off_by_default_nothing_is_set_up_or_made() -> None:
    settings = Settings()
    assert not settings.tracing.enabled
    assert tracing.setup(settings, "test") is False
    assert not tracing.enabled()
    with tracing.step("retrieve", "RETRIEVER") as span:
        assert span is None
        assert tracing.current() is None
    assert tracing.inject() == {}
    assert tracing.interceptors() == []
    assert tracing.trace_id_hex() == ""
    assert tracing.exemplar("answer-1") == {"trace_id": "answer-1"}
    with tracing.remote_span("index search", {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}) as remote:  # fmt: skip
        assert remote is None


def test_the_settings_refuse_what_no_exporter_could_use() -> None:
    with pytest.raises(ValueError, match="tracing_endpoint"):
        Settings(tracing_endpoint="localhost:4318")
    with pytest.raises(ValueError, match="tracing_sample_ratio"):
        Settings(tracing_sample_ratio=1.5)
    with pytest.raises(ValueError, match="tracing_protocol"):
        Settings(tracing_protocol="zipkin")


def test_a_step_is_a_child_span_with_its_kind_and_documents_without_their_text(
    traces: Traces,
) -> None:
    with tracing.step("answer", "CHAIN") as parent:
        assert parent is not None
        with tracing.step("hydrate", "RETRIEVER") as span:
            assert span is not None and tracing.current() is span
            span.set_attributes(
                tracing.documents("retrieval.documents", [("c1", 0.9, "secret"), ("c2", 0.5, "x")])
            )
            tracing.annotate({"durable_rag.stale_hits": 1, "skipped": None})
    hydrate, answer = traces.named("hydrate"), traces.named("answer")
    assert hydrate.parent is not None and hydrate.parent.span_id == answer.context.span_id
    assert hydrate.context.trace_id == answer.context.trace_id
    attributes = dict(hydrate.attributes or {})
    assert attributes["openinference.span.kind"] == "RETRIEVER"
    assert attributes["retrieval.documents.0.document.id"] == "c1"
    assert attributes["retrieval.documents.1.document.score"] == 0.5
    assert attributes["durable_rag.stale_hits"] == 1 and "skipped" not in attributes
    # Tenant text stays out unless capture_content is on.
    assert not any("content" in key for key in attributes)
    assert tracing.content("input.value", "a question") == {}
    assert tracing.messages("llm.input_messages", [{"role": "user", "content": "q"}]) == {}


def test_with_capture_on_the_text_goes_in(with_content: Traces) -> None:
    with tracing.step("generate", "LLM", tracing.llm("m", parameters={"max_tokens": 8})):
        tracing.annotate(
            {
                **tracing.llm("m", 12, 3),
                **tracing.messages("llm.input_messages", [{"role": "user", "content": "why?"}]),
                **tracing.content("output.value", "because"),
            }
        )
    attributes = dict(with_content.named("generate").attributes or {})
    assert attributes["llm.model_name"] == "m"
    assert attributes["llm.invocation_parameters"] == '{"max_tokens": 8}'
    assert attributes["llm.token_count.total"] == 15
    assert attributes["llm.input_messages.0.message.content"] == "why?"
    assert attributes["output.value"] == "because"


def test_a_failed_or_cancelled_step_says_which(traces: Traces) -> None:
    with pytest.raises(ValueError), tracing.step("rerank", "RERANKER"):
        raise ValueError("no reranker")

    async def cancelled() -> None:
        with tracing.step("generate", "LLM"):
            await asyncio.sleep(10)

    async def main() -> None:
        task = asyncio.ensure_future(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    rerank, generate = traces.named("rerank"), traces.named("generate")
    assert rerank.status.status_code is StatusCode.ERROR
    assert [e.name for e in rerank.events] == ["failed"]
    assert generate.status.description == "cancelled"
    assert [e.name for e in generate.events] == ["cancelled"]


def test_the_context_crosses_our_own_wire_and_the_far_side_is_a_child(traces: Traces) -> None:
    with tracing.step("retrieve", "RETRIEVER") as asker:
        headers = tracing.inject()
    assert set(headers) >= {"traceparent"}
    # The far side (the index worker's read socket) gets only the headers.
    with tracing.remote_span("index search", headers) as served:
        assert served is not None
    search = traces.named("index search")
    assert asker is not None and search.parent is not None
    assert search.parent.span_id == asker.get_span_context().span_id
    assert search.parent.is_remote
    with tracing.remote_span("index search", {}) as untraced:
        assert untraced is None  # an asker that does not trace makes no orphan root


def test_a_callers_traceparent_is_the_parent_and_the_trace_id_is_the_callers(
    traces: Traces,
) -> None:
    caller = "0af7651916cd43dd8448eb211c80319c"
    context = tracing.extract({"traceparent": f"00-{caller}-b7ad6b7169203331-01"})
    span = tracing.tracer().start_span("POST /v1/answers", context=context)
    assert tracing.trace_id_hex(span) == caller
    assert tracing.traceresponse(span).decode().startswith(f"00-{caller}-")
    span.end()


def test_log_lines_and_exemplars_carry_the_spans_trace_id(traces: Traces) -> None:
    with tracing.step("generate", "LLM") as span:
        record = logging.getLogger("t").makeRecord("t", logging.INFO, "f", 1, "hello", (), None)
        exemplar = tracing.exemplar("answer-abc")
    otel = tracing.trace_id_hex(span)
    assert len(otel) == 32
    assert exemplar == {"trace_id": "answer-abc", "otel_trace_id": otel}
    assert sum(len(k) + len(v) for k, v in exemplar.items()) <= 128  # OpenMetrics' bound
    _TraceFilter().filter(record)
    assert record.trace_id == f"- otel:{otel}"
    assert f'"otel_trace_id": "{otel}"' in _JsonFormatter().format(record)


def test_the_viewer_link_goes_to_the_trace() -> None:
    assert (
        tracing.viewer_link(Settings(), "ab" * 16)
        == "http://127.0.0.1:6006/redirects/traces/" + "ab" * 16
    )
    settings = Settings(tracing_viewer_url="https://traces.example.com/")
    assert tracing.viewer_link(settings, "cd").startswith("https://traces.example.com/redirects")
