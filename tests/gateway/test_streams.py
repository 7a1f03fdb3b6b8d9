"""Relaying a token stream to one request: order, resets, the end grace and the timeout."""

from __future__ import annotations

import asyncio

import pytest

from gateway.streams import Deadline, Reset, Token, relay
from ragkit.streaming import TokenEvent


async def collect(queue: asyncio.Queue[TokenEvent], result: asyncio.Future[str]) -> list[object]:
    return [item async for item in relay(queue, result, Deadline.after(5))]


async def test_tokens_then_a_reset_when_a_new_attempt_starts() -> None:
    queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
    result: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    for event in [
        TokenEvent("s", "m:1", "Hel"),
        TokenEvent("s", "m:2", "Hello"),
        TokenEvent("s", "m:2", " world", end=True),
    ]:
        queue.put_nowait(event)
    result.set_result("done")
    assert await collect(queue, result) == [
        Token("Hel"),
        Reset("m:2"),
        Token("Hello"),
        Token(" world"),
    ]


async def test_text_that_arrives_just_after_the_result_is_still_relayed() -> None:
    queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
    result: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    queue.put_nowait(TokenEvent("s", "m:1", "a"))

    async def late() -> None:
        await asyncio.sleep(0.05)
        result.set_result("done")
        await asyncio.sleep(0.1)  # the last NOTIFY comes on another connection
        queue.put_nowait(TokenEvent("s", "m:1", "b", end=True))

    asyncio.get_running_loop().create_task(late())
    assert await collect(queue, result) == [Token("a"), Token("b")]


async def test_no_result_within_the_timeout_is_a_timeout_error() -> None:
    queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
    result: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        async for _ in relay(queue, result, Deadline.after(0.1)):
            pass


def test_events_survive_the_notify_encoding() -> None:
    event = TokenEvent("abc", "smol:1", 'quote " and \u00e9', end=True)
    assert TokenEvent.decode(event.encode()) == event
