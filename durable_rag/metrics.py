"""Prometheus metric families of the workers. Labels are bounded: never a trace id."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

CHUNKS_EMBEDDED = Counter(
    "durable_rag_chunks_embedded_total", "Passages encoded by the embedding model.", ["model"]
)
DOCUMENTS_INGESTED = Counter(
    "durable_rag_documents_ingested_total",
    "Documents handled by ingest batches, by outcome.",
    ["status"],  # ingested | unchanged | failed
)
STEP_SECONDS = Histogram(
    "durable_rag_step_seconds",
    "Time spent in one pipeline step inside an activity.",
    ["step"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
