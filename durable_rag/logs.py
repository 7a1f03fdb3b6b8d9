"""Logging setup: readable lines in the embedded profile, JSON lines in production.

Temporal's workflow and activity loggers add the workflow id (the trace id) to every record they
emit; the formatters below print it.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from durable_rag.settings import Settings


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        details = getattr(record, "temporal_workflow", None) or getattr(
            record, "temporal_activity", None
        )
        if isinstance(details, dict) and "workflow_id" in details:
            entry["trace_id"] = details["workflow_id"]
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    for noisy in ("httpx", "urllib3", "transformers", "FlagEmbedding", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
