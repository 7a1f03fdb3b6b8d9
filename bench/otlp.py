"""An OTLP/HTTP trace receiver in this process: what the trace tests and the tracing cost rows
export to, as a collector or a viewer would receive them.

It speaks the protocol for real (protobuf `ExportTraceServiceRequest` at `/v1/traces`, gzip or
not, answered with an `ExportTraceServiceResponse`) and keeps what it received, span by span,
with each span's service, parent and attributes decoded.
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str  # "" for a root
    name: str
    service: str  # the resource's service.name
    attributes: dict[str, Any] = field(hash=False)
    events: tuple[str, ...]
    start_ns: int
    end_ns: int

    @property
    def kind(self) -> str:
        """Its OpenInference span kind ("" where it has none)."""
        return str(self.attributes.get("openinference.span.kind", ""))


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


class OtlpReceiver:
    """`url` is the `/v1/traces` endpoint to give exporters (DURABLE_RAG_TRACING_ENDPOINT)."""

    def __init__(self, port: int = 0, forward_to: str | None = None) -> None:
        # Another receiver's `/v1/traces` that gets each request too, as a collector's
        # exporter sends it on (the trace tests: the viewer).
        self.forward_to = forward_to
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.forward_errors: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._keep(request)
                if receiver.forward_to:
                    receiver._forward(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:  # `/count`: what it has received, for another process
                if self.path != "/count":
                    self.send_error(404)
                    return
                answer = json.dumps({"spans": len(receiver.spans)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            service=service,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=tuple(e.name for e in span.events),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.spans.extend(received)
            self.requests += 1

    def _forward(self, body: bytes) -> None:
        assert self.forward_to is not None
        request = urllib.request.Request(
            self.forward_to, data=body, headers={"Content-Type": "application/x-protobuf"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except OSError as exc:
            self.forward_errors.append(str(exc))

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(
        self,
        trace_id: str,
        done: Callable[[list[ReceivedSpan]], bool],
        timeout: float = 30.0,
    ) -> list[ReceivedSpan]:
        """The trace's spans once `done` holds for them; AssertionError, with what did arrive,
        after `timeout` seconds (each process exports a batch every 5 s)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.trace(trace_id)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                got = sorted(f"{s.service}:{s.name}" for s in spans)
                raise AssertionError(f"trace {trace_id} incomplete after {timeout} s: {got}")
            time.sleep(0.2)


def main() -> None:
    """`python -m bench.otlp --port P`: a receiver in a process of its own, as a collector runs
    apart from what it receives from (bench/tracing_cost.py); GET /count says how many spans."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    receiver = OtlpReceiver(parser.parse_args().port)
    receiver._server.serve_forever()


if __name__ == "__main__":
    main()
