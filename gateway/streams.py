"""Relay a generation's token stream (ragkit/streaming.py) to one HTTP request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ragkit.streaming import TokenEvent

# After the workflow's result arrives, how long to wait for the stream's last text: it was
# published before the activity returned, but travels on another connection.
END_GRACE_SECONDS = 0.5

# Cancellations sent after a client left: kept here so they finish (an unreferenced task may be
# collected before it runs).
_background: set[asyncio.Task[Any]] = set()


def in_background(work: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _background.add(task)
    task.add_done_callback(_background.discard)


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to do) and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass(frozen=True)
class Deadline:
    """When a live request's access timeout passes: `seconds` after it arrived (the gateway's
    first sight of it, gateway/middleware.py), on the monotonic clock."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float, arrived: float | None = None) -> Deadline:
        return cls((time.monotonic() if arrived is None else arrived) + seconds, seconds)

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    @property
    def said(self) -> str:
        """The timeout as an error message says it: the whole of it, from arrival."""
        return f"{self.seconds:g} s"


@dataclass(frozen=True)
class Token:
    text: str


@dataclass(frozen=True)
class Reset:
    """The text so far was abandoned (a retried attempt, or the fallback model): start over."""

    part: str


class _Parts:
    def __init__(self) -> None:
        self.part: str | None = None
        self.ended = False

    def accept(self, event: TokenEvent) -> list[Token | Reset]:
        out: list[Token | Reset] = []
        if event.part != self.part:
            if self.part is not None:
                out.append(Reset(event.part))
            self.part, self.ended = event.part, False
        if event.text:
            out.append(Token(event.text))
        self.ended = self.ended or event.end
        return out


async def relay(
    queue: asyncio.Queue[TokenEvent],
    result: asyncio.Future[Any],
    deadline: Deadline,
    on_text: Callable[[], None] | None = None,
) -> AsyncIterator[Token | Reset]:
    """Yield the stream's tokens until `result` is done, then what is left of the stream.
    TimeoutError when the result is not in by `deadline`. `on_text` is called once, before the
    first token (the request's place in the start window goes to the next)."""
    async for item in _relay(queue, result, deadline):
        if on_text is not None:
            on_text()
            on_text = None
        yield item


async def _relay(
    queue: asyncio.Queue[TokenEvent], result: asyncio.Future[Any], deadline: Deadline
) -> AsyncIterator[Token | Reset]:
    loop = asyncio.get_running_loop()
    parts = _Parts()
    while not result.done():
        remaining = deadline.left()
        if remaining <= 0:
            raise TimeoutError
        getter = asyncio.ensure_future(queue.get())
        try:
            await asyncio.wait({getter, result}, timeout=remaining, return_when="FIRST_COMPLETED")
        finally:
            getter.cancel()
        if getter.done() and not getter.cancelled():
            for item in parts.accept(getter.result()):
                yield item
    grace = loop.time() + END_GRACE_SECONDS
    while parts.part is not None and not parts.ended and loop.time() < grace:
        try:
            event = await asyncio.wait_for(queue.get(), timeout=grace - loop.time())
        except TimeoutError:
            break
        for item in parts.accept(event):
            yield item
    with contextlib.suppress(asyncio.QueueEmpty):
        while True:
            for item in parts.accept(queue.get_nowait()):
                yield item


async def text_events(
    queue: asyncio.Queue[TokenEvent],
    result: asyncio.Future[Any],
    deadline: Deadline,
    on_text: Callable[[], None] | None = None,
) -> AsyncIterator[dict[str, str]]:
    """`relay` as Server-Sent Events: `token` (`{"text"}`) and `reset` (`{"part"}`, start over)."""
    async for item in relay(queue, result, deadline, on_text):
        if isinstance(item, Token):
            yield {"event": "token", "data": json.dumps({"text": item.text})}
        else:
            yield {"event": "reset", "data": json.dumps({"part": item.part})}
