"""Spans as a test records them: ragkit.tracing on, behind an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragkit import tracing


@contextmanager
def recorded(capture_content: bool = False) -> Iterator[InMemorySpanExporter]:
    """Tracing on for the block, every finished span kept by the exporter it yields; off after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider, capture_content)
    try:
        yield exporter
    finally:
        tracing.uninstall()
