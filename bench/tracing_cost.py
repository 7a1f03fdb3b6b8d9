"""Row 6 of bench/serving.py: what tracing costs a request, on and off in the same run.

Rows 1 and 2's calls (an answer through the Temporal client, end to end; a streamed answer through
the gateway, to its first token) alternate between tracing off and on, request by request, the
order swapped each round, on the same in-process stack and engine. On: every span a request
makes in production (the gateway's, Temporal's interceptor's, our steps', vLLM's `llm_request`),
at a sampling ratio of 1.0, batched and exported over OTLP/HTTP to a receiver in this process
(bench/otlp.py), as to a collector. Off: no span object is made (ragkit/tracing.py returns at
once; Temporal's interceptor, installed for the on side, gets the no-op tracer), vLLM's tracing
flag off. The difference of the P50s is the figure.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from bench.otlp import OtlpReceiver
from ragkit import tracing

if TYPE_CHECKING:
    from bench.serving import Setup
    from ragkit.llm.engine import VllmEngine

# Target of issue 41: tracing on at a sampling ratio of 1.0 adds at most this at P50.
ON_TARGET_MS = 2.0


class TracingSides:
    """Tracing for this process, switched per request. Made before the engine: vLLM's request
    spans go through the global provider, which it would otherwise set to its own."""

    def __init__(self) -> None:
        self.receiver = OtlpReceiver().start()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "durable-rag-bench"})
        )
        exporter = OTLPSpanExporter(endpoint=self.receiver.url)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
        trace.set_tracer_provider(self.provider)
        # On first, so the clients and workers made next get Temporal's interceptor.
        tracing.install(self.provider)
        self.engine: VllmEngine | None = None

    def switch(self, on: bool) -> None:
        if on:
            tracing.install(self.provider)
        else:
            tracing.uninstall()
        if self.engine is not None:
            self.engine.trace_requests(on)

    def close(self) -> None:
        tracing.uninstall()
        self.provider.shutdown()
        self.receiver.close()


async def tracing_cost(s: Setup, sides: TracingSides, requests: int) -> dict[str, Any]:
    from bench.serving import WARMUP, request_for, stream_answer, timed_flow

    found: dict[str, list[float]] = {f"{k}_{side}": [] for k in ("answer", "ttft") for side in ("off", "on")}  # fmt: skip
    failed: list[str] = []
    batch = uuid.uuid4().hex[:8]
    for i in range(requests + WARMUP):
        request = request_for(i, s.max_tokens)
        for side in ("off", "on") if i % 2 == 0 else ("on", "off"):
            sides.switch(side == "on")
            asked = await timed_flow(s, request)
            streamed = await stream_answer(
                s.http, s.key, request.question, s.max_tokens, f"trace-{batch}-{side}-{i}"
            )
            if not streamed.ok:
                failed.append(f"{side}: {streamed.status} {streamed.detail}")
            if i >= WARMUP:
                found[f"answer_{side}"].append(asked.ms)
                found[f"ttft_{side}"].append(streamed.ttft_ms)
    sides.switch(False)
    sides.provider.force_flush()
    return {**found, "failed": failed, "spans": len(sides.receiver.spans)}


def figure_rows(t: dict[str, Any], pct: Any) -> list[dict[str, Any]]:
    rows = []
    for key, what in (
        ("answer", "answer through the Temporal client, end to end (row 1's call)"),
        ("ttft", "time to first token through the gateway's SSE (row 2's call)"),
    ):
        off, on = pct(t[f"{key}_off"], 0.5), pct(t[f"{key}_on"], 0.5)
        rows.append({
            "figure": f"tracing on against off: {what}, P50 (ms)",
            "baseline": f"off P50 {off:.1f}, P99 {pct(t[f'{key}_off'], 0.99):.1f}",
            "durable-rag": f"on P50 {on:.1f}, P99 {pct(t[f'{key}_on'], 0.99):.1f}",
            "result": f"{on - off:+.1f} ms at P50",
            "target": f"<= {ON_TARGET_MS:.0f} ms added at P50, sampling 1.0",
            "met": on - off <= ON_TARGET_MS and not t["failed"],
        })  # fmt: skip
    return rows
