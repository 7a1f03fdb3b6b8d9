"""Mapping of library errors to Temporal failures."""

from __future__ import annotations

import errno

from temporalio.exceptions import ApplicationError

from ragkit.index import IndexConfigError, IndexUnavailableError
from ragkit.policies import INDEX_CONFIG, INVALID_INPUT


def invalid_input(message: str) -> ApplicationError:
    return ApplicationError(message, type=INVALID_INPUT, non_retryable=True)


def index_error(exc: Exception) -> ApplicationError:
    if isinstance(exc, IndexConfigError):
        return ApplicationError(str(exc), type=INDEX_CONFIG, non_retryable=True)
    if isinstance(exc, IndexUnavailableError):
        return ApplicationError(str(exc), type="IndexUnavailable")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        # Retryable: freeing space (or compaction) lets the same write succeed; nothing was
        # committed in Postgres for it, so readers keep the previous version meanwhile.
        return ApplicationError(f"the index path is full: {exc}", type="IndexDiskFull")
    return ApplicationError(f"{type(exc).__name__}: {exc}", type="IndexError")
