"""Logging setup: readable lines in the embedded profile, JSON lines in production.

Every line carries a trace id: Temporal's workflow and activity loggers attach the workflow id
(which is named after the request id, `answer-<request id>`), and the gateway sets TRACE_ID for
the lines of each request it serves. With tracing on, a line written inside a span also carries
its OpenTelemetry trace id (`otel:<32 hex>`, JSON `otel_trace_id`): the one a trace viewer finds.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from typing import Any

from ragkit import tracing
from ragkit.settings import Settings

# The request being served (gateway); workflow and activity records carry their own.
TRACE_ID: ContextVar[str] = ContextVar("trace_id", default="")
_make_record = logging.getLogRecordFactory()


def _record_with_trace_id(*args: Any, **kwargs: Any) -> logging.LogRecord:
    # Stamped when the record is made: a handler may format it later, in another context.
    record = _make_record(*args, **kwargs)
    record.request_trace_id = TRACE_ID.get()
    record.otel_trace_id = tracing.trace_id_hex()  # "" unless tracing is on
    return record


logging.setLogRecordFactory(_record_with_trace_id)


def trace_id_of(record: logging.LogRecord) -> str:
    details = getattr(record, "temporal_workflow", None) or getattr(
        record, "temporal_activity", None
    )
    if isinstance(details, dict) and "workflow_id" in details:
        return str(details["workflow_id"])
    return str(getattr(record, "request_trace_id", ""))


class _TraceFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        trace_id = trace_id_of(record) or "-"
        otel = getattr(record, "otel_trace_id", "")
        record.trace_id = f"{trace_id} otel:{otel}" if otel else trace_id
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace_id = trace_id_of(record)
        if trace_id:
            entry["trace_id"] = trace_id
        otel = getattr(record, "otel_trace_id", "")
        if otel:
            entry["otel_trace_id"] = otel
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log.format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s [%(trace_id)s] %(name)s: %(message)s")
        )
    handler.addFilter(_TraceFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log.level)
    for noisy in ("httpx", "urllib3", "transformers", "FlagEmbedding", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
