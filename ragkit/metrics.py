"""Prometheus metric families of the workers. Labels are bounded: never a trace id."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, Info
from prometheus_client.metrics import MetricWrapperBase

CHUNKS_EMBEDDED = Counter(
    "durable_rag_chunks_embedded_total", "Passages encoded by the embedding model.", ["model"]
)
DOCUMENTS_INGESTED = Counter(
    "durable_rag_documents_ingested_total",
    "Documents handled by ingest batches, by outcome.",
    ["status"],  # ingested | unchanged | failed
)
# --- workflow and step ---------------------------------------------------------------------------
STEP_SECONDS = Histogram(
    "durable_rag_step_seconds",
    "Time spent in one pipeline step inside an activity.",
    ["step"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)

WORKER_BUILD = Info(
    "durable_rag_worker_build",
    "The build a worker polls its task queue as (Worker Deployment Versioning): its deployment "
    "and build id; an unversioned worker's deployment is empty.",
    ["task_queue"],
)

ACTIVITY_SECONDS = Histogram(
    "durable_rag_activity_seconds",
    "One activity attempt, by activity type and outcome (completed | failed | cancelled).",
    ["activity", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 600),
)
ACTIVITY_RETRIES = Counter(
    "durable_rag_activity_retries_total",
    "Activity attempts after the first (Temporal retrying), by activity type.",
    ["activity"],
)
# Workflow code records these through workflow.metric_meter(), so they are served by the Temporal
# SDK's endpoint (metrics_port + 1, see workers/common.py) and a replayed run never counts twice.
WORKFLOW_STEP_SECONDS = "durable_rag_workflow_step_seconds"  # histogram, by workflow_type, step
WORKFLOW_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 600)
# Counter, by workflow_type and kind (the fallback taken); the SDK adds the "_total" suffix.
DEGRADATIONS = "durable_rag_degradations"

# --- gateway (service level) ---------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "durable_rag_http_requests_total",
    "Gateway requests, by route template, method and status code.",
    ["route", "method", "status"],
)
HTTP_SECONDS = Histogram(
    "durable_rag_http_request_seconds",
    "Gateway request latency (a stream: until its last event), by route template.",
    ["route"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
ANSWER_TIMEOUTS = Counter(
    "durable_rag_http_timeouts_total",
    "Answers the gateway cancelled at its request timeout, by route template.",
    ["route"],
)
HTTP_STREAM_ERRORS = Counter(
    "durable_rag_http_stream_errors_total",
    "Streams that ended with an error event after their 200 status was sent (the status the "
    "event carries), by route template: the error SLI counts these with the 5xx responses.",
    ["route", "status"],
)
GATEWAY_REJECTED = Counter(
    "durable_rag_gateway_rejected_total",
    "Live requests refused with 429 before anything started (the work admitted before them plus "
    "their own latency would pass the latency target), by route template and model.",
    ["route", "model"],
)

# --- model ---------------------------------------------------------------------------------------
LLM_FIRST_TOKEN_SECONDS = Histogram(
    "durable_rag_llm_time_to_first_token_seconds",
    "Time from the request to the engine until its first token.",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LLM_TOKENS = Counter(
    "durable_rag_llm_tokens_total",
    "Tokens through the engine, by model and direction (prompt | completion).",
    ["model", "direction"],
)
GATEWAY_PEERS = Gauge(
    "durable_rag_gateway_peers",
    "Gateways live by their heartbeats (this one included): each admits that share of the "
    "latency bound.",
)
GATEWAY_BACKLOG = Gauge(
    "durable_rag_gateway_backlog_seconds",
    "Seconds of serving work held by the live requests this gateway admitted, by model.",
    ["model"],
)
LLM_RUNNING = Gauge(
    "durable_rag_llm_running_requests",
    "Requests the engine is generating for now (its batch).",
    ["model"],
)
LLM_GENERATION_TOKENS = Histogram(
    "durable_rag_llm_generation_tokens",
    "Length of each generation, in tokens.",
    ["model"],
    buckets=(1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
)

# --- business ------------------------------------------------------------------------------------
ANSWERS = Counter(
    "durable_rag_answers_total",
    "Answers by route (primary | fallback_model | cached_answer | default_reply) and whether "
    "anything was degraded.",
    ["route", "degraded"],
)
FEEDBACK = Counter(
    "durable_rag_feedback_total",
    "User votes on answers, by rating (up | down).",
    ["rating"],
)
ENGINE_SECONDS = Counter(
    "durable_rag_engine_seconds_total",
    "Model engine seconds spent on answers (their cost), by model and step.",
    ["model", "step"],
)


@functools.lru_cache(maxsize=4096)
def child(metric: MetricWrapperBase, *labels: str) -> Any:
    """`metric.labels(*labels)`, kept. prometheus_client's `labels()` takes a lock and checks
    each value, ~4 µs: a request the gateway refuses in a burst paid it three times, on the
    event loop that answers the rest. Only for labels whose values are bounded (routes, status
    codes, configured models), as every label here must be."""
    return metric.labels(*labels)
