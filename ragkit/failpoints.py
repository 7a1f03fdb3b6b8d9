"""Failpoints: faults injected on purpose, so the fault matrix (bench/faults.py) can break one
part of a running stack and watch the declared retries and fallbacks take over.

Off unless `DURABLE_RAG_FAILPOINTS_FILE` names a file; then every `hit(point)` reads that JSON
file (re-read only when its mtime changes, so a fault is switched on and off from outside while the
workers run). An absent or empty file means no fault. The file maps a point to what it does:

    {"embedding": {"error": "model failing"},          # RuntimeError in the embedder
     "index": {"error": "connection refused"},          # the vector index is unavailable
     "index_write": {"error": "disk_full"},             # OSError(ENOSPC) on index writes
     "activity:search_vectors": {"delay_seconds": 4}}   # an activity that outlives its timeout

Points: `embedding` (Embedder), `index` and `index_write` (VectorIndexActivities),
`activity:<name>` (a worker interceptor, for any activity), and `parser` (the parsing child
process, ragkit/parsing/isolation.py: `{"crash": "SIGSEGV"}`, `{"spin_seconds": 90}`,
`{"sleep_seconds": 300}` or `{"allocate_mb": 4096}`, for the document whose file name stem is
`"title"` when given, else for every document).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_path: Path | None = None
_seen: tuple[float, dict[str, dict[str, Any]]] = (0.0, {})


class InjectedFault(RuntimeError):
    """The error a failpoint raises (other than disk full, which is a real OSError)."""


def configure(path: Path | None) -> None:
    global _path, _seen
    with _lock:
        _path = path
        _seen = (0.0, {})
    if path is not None:
        log.warning("failpoints are ON, read from %s: this process breaks on purpose", path)


def enabled() -> bool:
    return _path is not None


def configured() -> Path | None:
    """The file failpoints are read from (a child process is handed it), or None."""
    return _path


def active() -> dict[str, dict[str, Any]]:
    """The failpoints set now (the file is read again only when it changed)."""
    global _seen
    path = _path
    if path is None:
        return {}
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return {}
    with _lock:
        if mtime != _seen[0]:
            try:
                text = path.read_text()
                points = json.loads(text) if text.strip() else {}
            except (OSError, ValueError) as exc:
                # A half-written file: keep what was set, the next change is read again.
                log.warning("cannot read failpoints from %s: %s", path, exc)
                return _seen[1]
            _seen = (mtime, points if isinstance(points, dict) else {})
        return _seen[1]


def spec(point: str) -> dict[str, Any]:
    return active().get(point) or {}


def hit(point: str) -> None:
    """Raise the fault set for `point`, if any (delays are for activities: see `delay_for`)."""
    error = spec(point).get("error")
    if not error:
        return
    if error == "disk_full":
        raise OSError(errno.ENOSPC, f"No space left on device (failpoint {point})")
    raise InjectedFault(f"failpoint {point}: {error}")


def delay_for(activity_type: str) -> float:
    return float(spec(f"activity:{activity_type}").get("delay_seconds") or 0.0)


def write(path: Path, points: dict[str, dict[str, Any]]) -> None:
    """Set the failpoints (atomically: a reader never sees half a file). {} clears them."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(points))
    os.replace(partial, path)
