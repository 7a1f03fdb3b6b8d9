"""Traces: one OpenTelemetry trace per request, across every process it crosses.

The pieces are the well-kept libraries'; this module holds our contract around them:
- the provider (`setup`): OTLP over HTTP or gRPC, parent-based sampling at `tracing.sample_ratio`,
  the process named in `service.name` (`durable-rag-gateway`, `-orchestrator`, `-index`, `-llm`,
  `-cli`), the spans' project for OpenInference viewers (`openinference.project.name`);
- Temporal's own interceptor (`interceptors`: client and workers, workflow and activity spans,
  none on replay), on every client `ragkit.temporal.connect` makes;
- our steps' spans (`step`) with the OpenInference attributes trace viewers for LLM apps read:
  span kind, documents with ids and scores, model names and token counts; tenant text only when
  `tracing.capture_content` is on (`capture`);
- the W3C context across our own wires (`inject`, `extract`): the gateway's caller, the index's
  read socket, the engine (vLLM's `trace_headers`, an OpenAI-compatible server's headers);
- one id to go between a trace and the rest (`trace_id_hex`, `exemplar`): the log lines and the
  metrics' exemplars carry the span's trace id beside ours.

Off (the default), `setup` installs nothing and every helper returns at once: no provider, no
exporter, no span object.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    RerankerAttributes,
    SpanAttributes,
)
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ragkit.settings import Settings
from schemas.answer import Answer

TRACER = "durable_rag"
PROJECT = "durable-rag"
# OpenInference's names (openinference-semantic-conventions), as trace viewers for LLM apps read
# them: the span kinds of our steps, and the attributes our spans set.
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
CHAIN = OpenInferenceSpanKindValues.CHAIN.value
RETRIEVER = OpenInferenceSpanKindValues.RETRIEVER.value
RERANKER = OpenInferenceSpanKindValues.RERANKER.value
LLM = OpenInferenceSpanKindValues.LLM.value
INPUT = SpanAttributes.INPUT_VALUE
OUTPUT = SpanAttributes.OUTPUT_VALUE
RETRIEVED = SpanAttributes.RETRIEVAL_DOCUMENTS
RERANKED = RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS
INPUT_MESSAGES = SpanAttributes.LLM_INPUT_MESSAGES
# Our own attributes, beside OpenInference's: what joins a span to our ids and our record.
REQUEST_ID = "durable_rag.request_id"
ROUTE = "durable_rag.route"
DEGRADED = "durable_rag.degraded"
TENANT = "durable_rag.tenant"


@dataclass
class _State:
    enabled: bool = False
    capture: bool = False
    provider: Any = None
    tracer: Any = None  # the provider's, made once: get_tracer builds a new one each call


_STATE = _State()


def enabled() -> bool:
    """Whether this process exports spans (`setup` found `tracing.enabled`)."""
    return _STATE.enabled


def capture() -> bool:
    """Whether tenant text (questions, passages, prompts, answers) may go into spans."""
    return _STATE.capture


def setup(settings: Settings, service: str) -> bool:
    """The process's tracer provider, when `tracing.enabled`; whether it exports. Called once,
    first thing, by each process's main (the gateway, each worker, the CLI)."""
    config = settings.tracing
    if not config.enabled:
        return False
    if _STATE.provider is not None:
        return True
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create(
        {
            "service.name": f"durable-rag-{service}",
            "service.namespace": PROJECT,
            "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
            "openinference.project.name": PROJECT,
        }
    )
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio))
    )
    # Batches every 5 s (the SDK's default): each export is an HTTP call, and on a busy CPU its
    # cost is latency; a viewer shows a request's spans within seconds of its answer.
    provider.add_span_processor(BatchSpanProcessor(_exporter(settings)))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    install(provider, config.capture_content)
    return True


def install(provider: Any, capture_content: bool = False) -> None:
    """Use `provider` as this process's tracing (tests: an in-memory exporter's). The API keeps
    the first global provider it is given, so this sets only ours."""
    _STATE.enabled, _STATE.capture, _STATE.provider = True, capture_content, provider
    _STATE.tracer = provider.get_tracer(TRACER)


def uninstall() -> None:
    _STATE.enabled, _STATE.capture, _STATE.provider, _STATE.tracer = False, False, None, None


def _exporter(settings: Settings) -> Any:
    config = settings.tracing
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=config.endpoint, insecure=config.endpoint.startswith("http:"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=config.endpoint)


def flush(timeout_seconds: float = 5.0) -> None:
    """Export what is buffered now (a CLI command before it exits, a test before it reads)."""
    if _STATE.provider is not None:
        _STATE.provider.force_flush(int(timeout_seconds * 1000))


class _Tracer(trace.Tracer):
    """Our provider's tracer while tracing is on, the API's no-op one otherwise, decided at each
    span: what Temporal's interceptor holds, so `uninstall` turns its spans off too."""

    _noop = trace.NoOpTracer()

    def _now(self) -> trace.Tracer:
        return _STATE.tracer if _STATE.enabled else self._noop

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return self._now().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._now().start_as_current_span(*args, **kwargs)


_TRACER = _Tracer()


def tracer() -> trace.Tracer:
    return _TRACER


def interceptors() -> list[Any]:
    """Temporal's OpenTelemetry interceptor for a client (its workers inherit it): spans for
    workflow starts, each workflow run, signal, query and update, and each activity and local
    activity, none of them again on replay. Runs started without a span (schedules, another
    SDK) get theirs too (`always_create_workflow_spans`)."""
    if not _STATE.enabled:  # `setup` first: a client made before it does not trace
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(tracer(), always_create_workflow_spans=True)]


# --- spans -----------------------------------------------------------------------------------


@contextmanager
def step(
    name: str, kind: str, attributes: Mapping[str, Any] | None = None
) -> Iterator[Span | None]:
    """A span for one of our steps (`retrieve`, `hydrate`, `rerank`, `generate`, ...), child of
    the current one, its OpenInference kind (`RETRIEVER`, `RERANKER`, `LLM`, `CHAIN`) set; None
    when tracing is off. An exception marks it failed; a cancellation says so."""
    if not _STATE.enabled:
        yield None
        return
    span = tracer().start_span(name, attributes={KIND: kind})
    if attributes:
        span.set_attributes(attributes)
    with _current(span):
        yield span


@contextmanager
def _current(span: Span) -> Iterator[None]:
    """`span` current for the block, ended after it; an exception marks it failed, a
    cancellation says so."""
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        cancelled = type(exc).__name__ in ("CancelledError", "CancelledErrorType")
        span.add_event(
            "cancelled" if cancelled else "failed", {"exception.type": type(exc).__name__}
        )
        span.set_status(Status(StatusCode.ERROR, "cancelled" if cancelled else str(exc)[:200]))
        raise
    finally:
        otel_context.detach(token)
        span.end()


def current() -> Span | None:
    """The current span when tracing is on and one is recording; None otherwise."""
    if not _STATE.enabled:
        return None
    span = trace.get_current_span()
    return span if span.is_recording() else None


def annotate(attributes: Mapping[str, Any]) -> None:
    """Attributes for the current span (nothing when there is none)."""
    span = current()
    if span is not None:
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


def event(name: str, attributes: Mapping[str, Any] | None = None) -> None:
    span = current()
    if span is not None:
        span.add_event(name, dict(attributes or {}))


def documents(prefix: str, hits: Sequence[tuple[str, float, str | None]]) -> dict[str, Any]:
    """OpenInference's document list (`retrieval.documents`, `reranker.output_documents`):
    `<prefix>.<i>.document.id` and `.score` for each hit, `.content` only with capture on."""
    attributes: dict[str, Any] = {}
    for i, (doc_id, score, content) in enumerate(hits):
        attributes[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_ID}"] = doc_id
        attributes[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_SCORE}"] = float(score)
        if content is not None and _STATE.capture:
            attributes[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_CONTENT}"] = content
    return attributes


def llm(
    model: str,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """OpenInference's LLM attributes: the model, its invocation parameters and token counts."""
    attributes: dict[str, Any] = {
        SpanAttributes.LLM_MODEL_NAME: model,
        SpanAttributes.LLM_SYSTEM: "vllm",
    }
    if parameters is not None:
        attributes[SpanAttributes.LLM_INVOCATION_PARAMETERS] = json.dumps(
            dict(parameters), sort_keys=True
        )
    if prompt_tokens is not None:
        attributes[SpanAttributes.LLM_TOKEN_COUNT_PROMPT] = prompt_tokens
    if completion_tokens is not None:
        attributes[SpanAttributes.LLM_TOKEN_COUNT_COMPLETION] = completion_tokens
    if prompt_tokens is not None and completion_tokens is not None:
        attributes[SpanAttributes.LLM_TOKEN_COUNT_TOTAL] = prompt_tokens + completion_tokens
    return attributes


def answered(answer: Answer) -> None:
    """An answer's outcome on the current span (the request's, the CLI command's): its run,
    how it was made, what degraded, its model and tokens."""
    if not _STATE.enabled:
        return
    annotate(
        {
            "durable_rag.workflow_id": answer.trace_id,
            ROUTE: answer.route,
            DEGRADED: list(answer.degradations),
            **llm(answer.model, answer.tokens.prompt, answer.tokens.completion),
            **content(OUTPUT, answer.answer),
        }
    )


def reranker(model: str, top_k: int, query: str) -> dict[str, Any]:
    """OpenInference's reranker attributes; the query only with capture on."""
    return {
        RerankerAttributes.RERANKER_MODEL_NAME: model,
        RerankerAttributes.RERANKER_TOP_K: top_k,
        **content(RerankerAttributes.RERANKER_QUERY, query),
    }


def messages(prefix: str, chat: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """A chat as OpenInference's `llm.input_messages.<i>.message.{role,content}`, with capture
    on only (the prompt holds the passages and the question)."""
    if not _STATE.capture:
        return {}
    attributes: dict[str, Any] = {}
    for i, message in enumerate(chat):
        attributes[f"{prefix}.{i}.{MessageAttributes.MESSAGE_ROLE}"] = message.get("role", "")
        attributes[f"{prefix}.{i}.{MessageAttributes.MESSAGE_CONTENT}"] = message.get("content", "")
    return attributes


def content(key: str, value: str | None) -> dict[str, Any]:
    """`{key: value}` when content capture is on (`input.value`, `output.value`, ...), else {}."""
    return {key: value} if _STATE.capture and value is not None else {}


# --- context across our wires ----------------------------------------------------------------


def inject() -> dict[str, str]:
    """The current context as W3C headers (`traceparent`, `tracestate`); {} when off."""
    if not _STATE.enabled:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The context a caller sent (W3C `traceparent` and `tracestate`): a new span's parent."""
    return propagate.extract(headers)


@contextmanager
def remote_span(
    name: str, headers: Mapping[str, str] | None, kind: SpanKind = SpanKind.SERVER
) -> Iterator[Span | None]:
    """A span for work a peer asked for over our own wire (the index's read socket), child of
    the context the peer sent; None when off or the peer sent none."""
    if not _STATE.enabled or not headers:
        yield None
        return
    span = tracer().start_span(name, context=extract(headers), kind=kind)
    with _current(span):
        yield span


# --- one id ----------------------------------------------------------------------------------


def trace_id_hex(span: Span | None = None) -> str:
    """The trace id (32 hex digits) of `span` or the current one; "" when off or none."""
    if not _STATE.enabled:
        return ""
    context = (span or trace.get_current_span()).get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def traceresponse(span: Span) -> bytes:
    """The W3C `traceresponse` header of `span`: `00-<trace id>-<span id>-<flags>`."""
    context = span.get_span_context()
    flags = int(context.trace_flags)
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}".encode()


def exemplar(trace_id: str) -> dict[str, str] | None:
    """A metric's exemplar: our trace id, and the span's where tracing is on (both within
    OpenMetrics' 128 characters)."""
    labels = {"trace_id": trace_id[:64]} if trace_id else {}
    otel = trace_id_hex()
    if otel:
        labels["otel_trace_id"] = otel
    return labels or None


def viewer_link(settings: Settings, trace_id: str) -> str:
    """Where an operator opens trace `trace_id`: the viewer's redirect to it."""
    base = settings.tracing.viewer_url or f"http://127.0.0.1:{settings.tracing.viewer_port}"
    return f"{base.rstrip('/')}/redirects/traces/{trace_id}"
