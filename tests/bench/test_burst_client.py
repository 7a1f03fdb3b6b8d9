"""bench/burst_client.py against a real uvicorn: what it reads of a 429, of a streamed answer
(chunked SSE, lines split across chunks) and of a plain one, and a server that closes early."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvloop

from bench.burst_client import Sent, ask
from durable_rag.stack.process import free_port
from gateway.server import serving_here

SEEN: list[dict[str, Any]] = []


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    asked = json.loads(body)
    SEEN.append({"headers": dict(scope["headers"]), "body": asked})
    question = asked["messages"][0]["content"]
    if "refuse" in question:
        headers = [(b"retry-after", b"7"), (b"server-timing", b"body;dur=0.2, admit;dur=0.1")]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"detail": "overloaded"}'})
    elif "break" in question:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: {", "more_body": True})
        raise RuntimeError("the server fails mid-stream")
    elif asked["stream"]:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        role = {"choices": [{"delta": {"role": "assistant"}}]}
        token = {"choices": [{"delta": {"content": "Hi"}}]}
        usage = {"choices": [], "usage": {"prompt_tokens": 42}}
        text = (
            "".join(f"data: {json.dumps(c)}\n\n" for c in (role, token, usage)) + "data: [DONE]\n\n"
        )
        raw = text.encode()
        for part in (raw[:10], raw[10:37], raw[37:]):  # lines split across chunks
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})
    else:
        reply = json.dumps({"choices": [], "usage": {"prompt_tokens": 17}}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": reply})


async def exchanges() -> list[Sent]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with serving_here(app, port):
        return [
            await ask(url, "k", "refuse me", 8, True, 0, 10),
            await ask(url, "k", "stream me", 8, True, 1, 10),
            await ask(url, "k", "answer me", 8, False, 0, 10),
            await ask(url, "k", "break me", 8, True, 0, 10),
        ]


def test_the_burst_client_reads_refusals_streams_plain_answers_and_failures() -> None:
    """On uvloop, as bench/burst.py runs it."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        refused, streamed, plain, broken = runner.run(exchanges())
    assert refused.status == 429 and refused.retry_after == "7"
    assert refused.timing == {"body": 0.2, "admit": 0.1}
    assert 0 <= refused.sent <= refused.headers <= refused.total

    assert streamed.status == 200 and streamed.error_event == 0
    assert streamed.prompt_tokens == 42 and streamed.gateway == 1
    assert streamed.headers < streamed.first_token <= streamed.total  # the content, not the role

    assert plain.status == 200 and plain.prompt_tokens == 17

    assert str(broken.status).startswith("error: ")

    sent = SEEN[0]
    assert sent["headers"][b"authorization"] == b"Bearer k"
    assert sent["headers"][b"x-request-id"].startswith(b"burst-")
    assert sent["body"]["max_tokens"] == 8 and sent["body"]["model"] == "durable-rag"
    assert sent["body"]["stream_options"] == {"include_usage": True}
    assert "stream_options" not in SEEN[2]["body"]
