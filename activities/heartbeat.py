"""Heartbeats around one long blocking call (a sync activity cannot beat while it waits)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")


def beating(work: Callable[[], T], every_seconds: float = 10.0) -> T:
    """Run `work` in a thread and heartbeat until it returns (or raises)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # re-raised in the activity's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while thread.is_alive():
        activity.heartbeat()
        thread.join(every_seconds)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
